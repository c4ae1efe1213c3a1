import type * as z from 'zod';
// The class alone, not zod's `core` namespace: reaching it through `z.core` brought every one of zod's
// locales into the worker's bundle (326 KB, past its 1 MB).
import { $ZodAsyncError } from 'zod/v4/core';

/** A tool's input parsed: the value the tool gets, the issues to tell the model, or what the schema threw. */
/** `checksOnly`: every issue is a check's (a refine's), the fields themselves fitting the schema. */
export type ParsedInput = { ok: true; data: unknown } | { ok: false; issues: string; checksOnly: boolean } | { ok: false; thrown: unknown };

/** Schemas found to check asynchronously (a refine that looks a table up): parsed with safeParseAsync from then on. */
const asyncSchemas = new WeakSet<z.ZodType>();

/**
 * Parses a tool's input as the model sent it, or as a decision recorded it. A refine or transform may be
 * async, which a synchronous parse throws on, and may throw, where it should have added an issue: either
 * escaped the step as a crash, redelivered until its run failed as one that "keeps crashing". The
 * synchronous parse stays the common path; a schema that needs the other is known after its first parse.
 */
export async function parseToolInput(schema: z.ZodType, given: unknown): Promise<ParsedInput> {
  // The tool gets a copy: zod hands back the given objects under z.any() and z.unknown(), so
  // a tool that changed such a field (a timestamp) changed the call on record, and the input its ctx.once
  // key was claimed with, which then differed at the next try and was refused as a reused key.
  const input = copyOf(given);
  let parsed: z.ZodSafeParseResult<unknown>;
  try {
    if (asyncSchemas.has(schema)) parsed = await schema.safeParseAsync(input);
    else {
      try {
        parsed = schema.safeParse(input);
      } catch (error) {
        if (!(error instanceof $ZodAsyncError)) throw error;
        asyncSchemas.add(schema);
        parsed = await schema.safeParseAsync(input);
      }
    }
  } catch (error) {
    return { ok: false, thrown: error };
  }
  if (parsed.success) return { ok: true, data: parsed.data };
  const { issues } = parsed.error;
  return { ok: false, issues: issues.map((i) => `${i.path.join('.') || '(input)'}: ${i.message}`).join('; '), checksOnly: issues.every((i) => i.code === 'custom') };
}

/**
 * A JSON value's own copy, walked (a model's input is JSON: 0.1 us for a small one, where structuredClone
 * took 0.8-1.8 us of a step). What is not plain JSON (a stub model's Date or class) is kept as it is, and
 * a value too deep to walk is handed on uncopied, as before.
 */
function copyOf(value: unknown): unknown {
  try {
    return walkCopy(value);
  } catch {
    return value;
  }
}

function walkCopy(value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) return value.map(walkCopy);
  const proto = Object.getPrototypeOf(value) as unknown;
  if (proto !== Object.prototype && proto !== null) return value;
  const copy: Record<string, unknown> = {};
  for (const key of Object.keys(value)) {
    const field = walkCopy((value as Record<string, unknown>)[key]);
    // JSON.parse makes "__proto__" an own field; assigned, it would set the copy's prototype instead.
    if (key === '__proto__') Object.defineProperty(copy, key, { value: field, enumerable: true, writable: true, configurable: true });
    else copy[key] = field;
  }
  return copy;
}
