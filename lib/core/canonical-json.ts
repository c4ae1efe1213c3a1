/**
 * JSON with object keys sorted, so equal values serialize to equal bytes: prompts stay byte-identical
 * across steps (prompt caching) and argument hashes do not depend on key order.
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

/**
 * The value with every plain object's keys in order. An object already in order, with every value in it
 * too, is itself, not a copy: a head decoded from its stored text is, and copying it was most of its encoding.
 */
function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) {
    let copy: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const sorted = sortKeys(value[i]);
      if (sorted !== value[i]) (copy ??= value.slice())[i] = sorted;
    }
    return copy ?? value;
  }
  if (!value || typeof value !== 'object' || (value as object).constructor !== Object) return value;
  const object = value as Record<string, unknown>;
  const keys = Object.keys(object);
  let inOrder = true;
  for (let i = 1; i < keys.length && inOrder; i++) inOrder = keys[i - 1]! < keys[i]!;
  if (!inOrder) keys.sort();
  let out: Record<string, unknown> | undefined = inOrder ? undefined : {};
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    const sorted = sortKeys(object[key]);
    if (out) out[key] = sorted;
    else if (sorted !== object[key]) {
      // In order, but this value is not: a copy from here, the keys before it as they are.
      out = {};
      for (let j = 0; j < i; j++) out[keys[j]!] = object[keys[j]!];
      out[key] = sorted;
    }
  }
  return out ?? value;
}
