/** A promise with its resolve at hand: how a schedule holds a frozen worker until it lets it go. */
export interface Deferred<T> { promise: Promise<T>; resolve(value: T): void }

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => { resolve = r; });
  return { promise, resolve };
}
