/** DynamoDB refuses any item over 400 KB (attribute names and values together). */
export const DYNAMODB_ITEM_LIMIT = 400 * 1024;

/**
 * The size DynamoDB counts for an item given as native values (the DocumentClient's input), following
 * its published rules: names and strings by UTF-8 length, numbers by significant digits, one byte for
 * booleans and nulls, 3 bytes plus one per element for lists and maps. Used to keep every item below the
 * limit before it is sent, and by the benchmarks.
 */
export function itemSize(item: Record<string, unknown>): number {
  let total = 0;
  for (const [name, value] of Object.entries(item)) {
    if (value === undefined) continue;
    total += Buffer.byteLength(name) + valueSize(value);
  }
  return total;
}

function valueSize(value: unknown): number {
  if (value === null || typeof value === 'boolean') return 1;
  if (typeof value === 'string') return Buffer.byteLength(value);
  if (typeof value === 'number' || typeof value === 'bigint') return numberSize(String(value));
  if (value instanceof Uint8Array) return value.byteLength;
  if (Array.isArray(value)) return 3 + value.reduce((n: number, v) => n + 1 + valueSize(v), 0);
  if (value instanceof Set) return [...value].reduce((n: number, v) => n + valueSize(v), 0);
  if (typeof value === 'object') {
    return 3 + Object.entries(value as Record<string, unknown>).reduce((n, [k, v]) => n + 1 + Buffer.byteLength(k) + valueSize(v), 0);
  }
  return 0;
}

function numberSize(text: string): number {
  const digits = text.replace(/^-/, '').replace(/e.*$/i, '').replace('.', '').replace(/^0+/, '').replace(/0+$/, '');
  return Math.min(21, Math.ceil(Math.max(1, digits.length) / 2) + 1);
}
