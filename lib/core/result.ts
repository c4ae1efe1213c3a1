import { createHash } from 'node:crypto';
import { canonicalJson, unstorableReason } from './canonical-json.ts';
import { PermanentError } from './errors.ts';
import { LARGE_OUTPUT_EXCERPT, excerpt } from './prompt.ts';
import type { StepResult } from './state.ts';

/** Outputs above this many bytes go to the blob store; the checkpoint keeps an excerpt and the ref. */
export const DEFAULT_INLINE_LIMIT = 4096;

export interface ShapedResult {
  result: StepResult;
  /** Present when the output is too large to keep inline. */
  blob?: { ref: string; data: Buffer };
}

/** A tool's output as stored and shown to the model; throws a PermanentError naming the tool if it is not JSON. */
export function outputText(output: unknown, tool: string): string {
  if (typeof output === 'string') return output;
  if (output === undefined) return '';
  let text: string | undefined;
  try {
    text = canonicalJson(output);
  } catch (error) {
    // Too long for one string, a stack overflow (a value that contains itself, or nests past the stack), a
    // BigInt or a promise: said with the field it is in.
    const why = unstorableReason(output, error);
    throw new PermanentError(`tool ${tool} returned a value that cannot be stored as JSON (${why}); return plain data`);
  }
  // JSON.stringify writes nothing for a function or a symbol, or for an object whose toJSON gives one or undefined.
  if (text === undefined) {
    const what = typeof output === 'object' ? 'an object whose toJSON gives nothing JSON holds' : `a ${typeof output}`;
    throw new PermanentError(`tool ${tool} returned ${what}, which cannot be stored as JSON; return plain data`);
  }
  return text;
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
