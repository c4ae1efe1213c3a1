import { collectionAsJson, unstorableReason } from './canonical-json.ts';
import { PermanentError } from './errors.ts';

/**
 * The text an idempotency ledger keeps for an effect's result, and `value`, that text read back: what the
 * effect's caller gets, as a retry would, so a result JSON changes (a Date a string, a Map an object or
 * its pairs, a Set an array, undefined null) is the same before a crash as after it, where a tool that
 * used it as it was broke only after one.
 * An effect that ran but returned what JSON cannot hold (a value that refers to itself, a BigInt, a
 * function, a promise) is kept as null all the same: the key is then completed and the effect never runs again
 * under it, where a failed completion would leave the claim to run out and the next try to apply the
 * effect a second time. `unstorable` says why, for the step to fail with.
 */
export function storableResult(key: string, result: unknown): { json: string; value: unknown; unstorable?: PermanentError } {
  let json: string | undefined;
  let why: string | undefined;
  try {
    json = JSON.stringify(result ?? null, (_key, value: unknown) => collectionAsJson(value));
    if (json === undefined) why = `it is a ${typeof result}`;
  } catch (error) {
    why = unstorableReason(result, error);
  }
  if (json !== undefined) return { json, value: JSON.parse(json) };
  return {
    json: 'null',
    value: null,
    unstorable: new PermanentError(`the effect under ${key} ran, but its result cannot be stored as JSON (${why}): it is kept as null and will not run again under this key; return plain data from it`),
  };
}
