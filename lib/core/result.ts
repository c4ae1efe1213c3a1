import { createHash } from 'node:crypto';
import { canonicalJson } from './canonical-json.ts';
import { excerpt } from './prompt.ts';
import type { StepResult } from './state.ts';

/** Outputs above this many bytes go to the blob store; the checkpoint keeps an excerpt and the ref. */
export const DEFAULT_INLINE_LIMIT = 4096;
// Big enough to show the shape of the output, small enough that the uncached tail of each prompt (the
// last result) stays under a tenth of it once a run has a few steps: see bench/prompt-cache.ts.
export const LARGE_OUTPUT_EXCERPT = 1000;

export interface ShapedResult {
  result: StepResult;
  /** Present when the output is too large to keep inline. */
  blob?: { ref: string; data: Buffer };
}

export function outputText(output: unknown): string {
  if (typeof output === 'string') return output;
  if (output === undefined) return '';
  return canonicalJson(output);
}

export function shapeResult(text: string, ok: boolean, inlineLimit = DEFAULT_INLINE_LIMIT): ShapedResult {
  // Counted without a copy: only an output that goes to the blob store needs its bytes.
  const bytes = Buffer.byteLength(text, 'utf8');
  // Keys in order: a record's result is then stored without a sorted copy (canonical-json.ts).
  if (bytes <= inlineLimit) return { result: { bytes, ok, text } };
  const data = Buffer.from(text, 'utf8');
  const ref = blobRef(data);
  return { result: { bytes: data.length, ok, ref, text: excerpt(text, LARGE_OUTPUT_EXCERPT) }, blob: { ref, data } };
}

/** Content-addressed: the same output always has the same ref, so a retried upload is harmless. */
export function blobRef(data: Buffer): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}
