/**
 * A secret read from a store, kept for a while and read again: the Anthropic key (api-key.ts) and, on AWS,
 * the approval signing key (lib/aws/wait-services.ts). A file of its own, importing nothing: a function
 * that needs only this (the API, the events function) bundled api-key.ts's whole Secrets Manager client
 * with it, 18 KB, through that file's dynamic import.
 */

/** Where the Anthropic API key comes from: the environment locally, Secrets Manager on AWS. */
export interface ApiKeySource {
  (): Promise<string>;
  /** Forgets a remembered key, so the next call reads it again: the API refused it (a rotated key). */
  invalidate?(): void;
}

/** How long a key read from a store is used before it is read again, so a rotation reaches every container. */
export const KEY_REFRESH_MS = 5 * 60_000;
/** After a failed refresh, the key that worked is used this much longer before the next read. */
const REFRESH_RETRY_MS = 30_000;

/**
 * Shares what `read` returns with every caller for `refreshMs`, then reads again (one read at a time).
 * A failed first read is not remembered, so the next step tries again. A failed refresh keeps the key
 * that worked a little longer: a throttled secret store does not stop the steps. invalidate() drops the
 * key (the API refused it), so the next call must read a new one; a source `read` of its own is
 * invalidated with it.
 */
export function rememberKey(
  read: (() => Promise<string>) | ApiKeySource,
  options: { refreshMs?: number; now?: () => number } = {},
): ApiKeySource {
  const refreshMs = options.refreshMs ?? KEY_REFRESH_MS;
  const now = options.now ?? Date.now;
  let key: string | undefined;
  let freshUntil = 0;
  let reading: Promise<string> | undefined;
  let generation = 0;
  const source: ApiKeySource = () => {
    if (key !== undefined && now() < freshUntil) return Promise.resolve(key);
    if (!reading) {
      const mine = generation;
      const current = (reading = read().then(
        (value) => {
          if (mine === generation) { key = value; freshUntil = now() + refreshMs; }
          return value;
        },
        (error: unknown) => {
          if (mine !== generation || key === undefined) throw error;
          freshUntil = now() + REFRESH_RETRY_MS;
          return key;
        },
      ).finally(() => {
        if (reading === current) reading = undefined;
      }));
    }
    return reading;
  };
  source.invalidate = () => {
    generation++;
    key = undefined;
    reading = undefined;
    (read as ApiKeySource).invalidate?.();
  };
  return source;
}
