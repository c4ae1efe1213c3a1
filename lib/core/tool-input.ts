import type * as z from 'zod';
// The class alone, not zod's `core` namespace: reaching it through `z.core` brought every one of zod's
// locales into the worker's bundle (326 KB, past its 1 MB).
import { $ZodAsyncError } from 'zod/v4/core';

/** A tool's input parsed: the value the tool gets, the issues to tell the model, or what the schema threw. */
export type ParsedInput = { ok: true; data: unknown } | { ok: false; issues: string } | { ok: false; thrown: unknown };

/** Schemas found to check asynchronously (a refine that looks a table up): parsed with safeParseAsync from then on. */
const asyncSchemas = new WeakSet<z.ZodType>();

/**
 * Parses a tool's input as the model sent it, or as a decision recorded it. A refine or transform may be
 * async, which a synchronous parse throws on, and may throw, where it should have added an issue: either
 * escaped the step as a crash, redelivered until its run failed as one that "keeps crashing". The
 * synchronous parse stays the common path; a schema that needs the other is known after its first parse.
 */
export async function parseToolInput(schema: z.ZodType, input: unknown): Promise<ParsedInput> {
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
  return { ok: false, issues: parsed.error.issues.map((i) => `${i.path.join('.') || '(input)'}: ${i.message}`).join('; ') };
}
