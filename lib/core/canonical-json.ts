/**
 * JSON with object keys sorted, so equal values serialize to equal bytes: prompts stay byte-identical
 * across steps (prompt caching) and argument hashes do not depend on key order.
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(canonicalValue(value));
}

/**
 * JSON.stringify's RangeError for a value whose JSON would pass V8's longest string (about 512 MB); its
 * other RangeError is a stack overflow (a value that refers to itself, or nests past the stack).
 */
export const isTooLongForJson = (error: unknown): boolean => error instanceof RangeError && /invalid string length/i.test(error.message);

/** What the reason of a value JSON cannot hold says when it is too long for one string. */
export const TOO_LONG_FOR_JSON = 'its JSON would be longer than the longest string JavaScript can hold, about 512 MB';

/**
 * What it says on the stack overflow: an Error whose cause is itself overflows as deep nesting, not as
 * JSON.stringify's circular TypeError (written as an object, it is a new object at each level).
 */
export const SELF_OR_TOO_DEEP = 'it refers to itself, or is nested too deeply';

/**
 * The value as its canonical JSON reads back: every plain object's keys in order, undefined fields gone,
 * undefined array items null, a Map or a Set as what it holds. Itself, not a copy, where it is so already, and so is everything in it: a
 * head decoded from its stored text is, and copying it was most of its encoding.
 */
export function canonicalValue(value: unknown): unknown {
  // JSON writes -0 as 0, and NaN and the infinities as null.
  if (typeof value === 'number') return Number.isFinite(value) ? value + 0 : null;
  if (Array.isArray(value)) {
    let copy: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const item = value[i] === undefined ? null : canonicalValue(value[i]);
      if (!Object.is(item, value[i])) (copy ??= value.slice())[i] = item;
    }
    return copy ?? value;
  }
  if (!value || typeof value !== 'object') return value;
  // A plain object: Object's own, or one of no prototype (Object.create(null), fast-check's), or one whose own
  // `constructor` field hides Object's: each is written as its fields, sorted.
  if ((value as object).constructor !== Object) {
    const proto: unknown = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) {
      // JSON.stringify writes a Map or a Set as {}: a tool that returned one had its output stored, and shown
      // to the model, as nothing. Written as what it holds: a Set as an array, a Map as an object when every
      // key is a string, else as its [key, value] pairs.
      const held = collectionAsJson(value);
      if (held !== value) return canonicalValue(held);
      // What JSON.stringify would write of it (a Date's string, a Buffer's { type, data }), with its keys
      // sorted too: left to JSON.stringify, a toJSON object's keys came out in the order it made them.
      const toJSON = (value as { toJSON?: unknown }).toJSON;
      return typeof toJSON === 'function' ? canonicalValue(toJSON.call(value, '')) : value;
    }
  }
  const object = value as Record<string, unknown>;
  const keys = Object.keys(object);
  let inOrder = true;
  // Array-index keys come first in any object, in numeric order ("9" before "10"), whatever was sorted.
  for (let i = 1; i < keys.length && inOrder; i++) inOrder = keys[i - 1]! < keys[i]! || isArrayIndex(keys[i - 1]!);
  if (!inOrder) keys.sort();
  let out: Record<string, unknown> | undefined = inOrder ? undefined : {};
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    const field = object[key];
    const canonical = field === undefined ? undefined : canonicalValue(field);
    if (out) {
      if (canonical !== undefined) setField(out, key, canonical);
    } else if (!Object.is(canonical, field) || field === undefined) {
      // In order, but this field is not as stored: a copy from here, the fields before it as they are.
      out = {};
      for (let j = 0; j < i; j++) setField(out, keys[j]!, object[keys[j]!]);
      if (canonical !== undefined) setField(out, key, canonical);
    }
  }
  return out ?? value;
}

/**
 * Why a value's JSON could not be written, given what the write threw: where in the value the trouble is
 * when it can be found (`a BigInt at rows.0.id`), where the write's own message named no field (`Do not know
 * how to serialize a BigInt`) or said only that a value nested too deeply.
 */
export function unstorableReason(value: unknown, error: unknown): string {
  if (isTooLongForJson(error)) return TOO_LONG_FOR_JSON;
  let found: string | undefined;
  try {
    found = unstorablePart(value, [], []);
  } catch {
    // Nested past the stack here too: nothing better to say than the write's own reason.
  }
  if (found !== undefined) return found;
  return error instanceof RangeError ? SELF_OR_TOO_DEEP : String((error as Error | undefined)?.message ?? error).split('\n')[0]!;
}

/**
 * The first part of a value JSON cannot hold, read as canonicalValue reads it (a Map as what it holds, a
 * toJSON's value), with its path as a zod issue writes one: a BigInt, a promise, a field whose getter
 * throws, or a reference back to a value that holds it. Only walked once a write has failed.
 */
function unstorablePart(value: unknown, path: (string | number)[], holders: { value: unknown; depth: number }[]): string | undefined {
  const at = path.length ? ` at ${path.join('.')}` : '';
  if (typeof value === 'bigint') return `a BigInt${at}: write it as a string or a number`;
  if (!value || typeof value !== 'object') return undefined;
  const holder = holders.find((h) => h.value === value);
  if (holder) return `it refers to itself: ${path.join('.')} is ${holder.depth ? path.slice(0, holder.depth).join('.') : 'the whole value'} again`;
  if (value instanceof Promise) return `a promise${at}: await it`;
  let shown: unknown = value;
  if (!Array.isArray(value)) {
    const proto: unknown = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) {
      shown = collectionAsJson(value);
      const toJSON = (value as { toJSON?: unknown }).toJSON;
      if (shown === value && typeof toJSON === 'function') {
        try {
          shown = toJSON.call(value, '');
        } catch (error) {
          return `its toJSON threw${at}: ${String((error as Error | undefined)?.message ?? error).split('\n')[0]}`;
        }
      }
    }
  }
  if (shown !== value && (typeof shown !== 'object' || shown === null)) return unstorablePart(shown, path, holders);
  holders.push({ value, depth: path.length });
  try {
    const object = shown as Record<string, unknown>;
    for (const key of Array.isArray(shown) ? shown.keys() : Object.keys(object)) {
      let field: unknown;
      try {
        field = object[key as string];
      } catch (error) {
        return `reading ${[...path, key].join('.')} threw: ${String((error as Error | undefined)?.message ?? error).split('\n')[0]}`;
      }
      const found = unstorablePart(field, [...path, key], holders);
      if (found !== undefined) return found;
    }
  } finally {
    holders.pop();
  }
  return undefined;
}

/**
 * A Map or a Set as JSON can hold what it holds (JSON.stringify writes either as {}), an Error as its
 * name, message and own fields (JSON.stringify writes {}: its message and stack are not enumerable), a
 * typed array as its numbers (JSON.stringify writes an object keyed "0", "1"...), any other value as it
 * is. Also what an effect's result is stored with (once-result.ts).
 */
export function collectionAsJson(value: unknown): unknown {
  // JSON.stringify writes a promise as {}: a field whose await was left out (`{ count: countRows() }`) was
  // stored, and shown to the model, as nothing, and an effect's result kept so under its key for good.
  if (value instanceof Promise) throw new TypeError('a promise cannot be written as JSON');
  if (value instanceof Set) return [...value];
  if (value instanceof Map) return [...value.keys()].every((key) => typeof key === 'string') ? mapObject(value) : [...value];
  if (value instanceof Error) return errorObject(value);
  // A Buffer has its own toJSON ({ type, data }), which JSON.stringify applies before any replacer: left to it,
  // so a Buffer reads the same in a tool output as in an effect's result.
  if (ArrayBuffer.isView(value) && !(value instanceof DataView) && typeof (value as { toJSON?: unknown }).toJSON !== 'function') {
    return Array.from(value as unknown as ArrayLike<unknown>);
  }
  return value;
}

/**
 * An Error as the fields a reader needs: its name and message, then its own enumerable fields (a `code`, a
 * `status`), and its cause. Not its stack: it names the worker's files and lines, differs between workers,
 * and would make the same failure two different outputs.
 */
function errorObject(error: Error): Record<string, unknown> {
  // `new Error(m, { cause })` makes its cause an own field that is not enumerable; assigned, it is one of the fields.
  const out: Record<string, unknown> = { name: error.name, message: error.message, ...(error.cause !== undefined ? { cause: error.cause } : {}) };
  for (const key of Object.keys(error)) if (key !== 'stack') setField(out, key, (error as unknown as Record<string, unknown>)[key]);
  return out;
}

/** A Map of string keys as a plain object; `__proto__` kept as a field, as JSON.parse keeps it. */
function mapObject(map: Map<unknown, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of map) setField(out, key as string, value);
  return out;
}

/**
 * `out[key] = value`, except for a `__proto__` key (JSON.parse makes it an own field, as any other): an
 * assignment would set the copy's prototype instead, and the field would be gone from the copy's JSON
 * only, so the same value written in another key order would give other bytes.
 */
function setField(out: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  else out[key] = value;
}

/** A key JavaScript keeps as an array index (0 to 2^32 - 2, written plainly): objects list those first. */
const isArrayIndex = (key: string): boolean => /^(?:0|[1-9]\d{0,9})$/.test(key) && Number(key) <= 4294967294;
