import { randomBytes } from 'node:crypto';
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { InvalidInputError } from '../core/errors.ts';
import { SIGNING_KEY_FILE_ENV, SIGNING_KEY_SECRET_ENV } from '../settings.ts';
import { makeDir } from '../make-dir.ts';

/**
 * At least 32 bytes of key: HMAC-SHA256 gains nothing from more, and less is guessable. Kept here, not
 * with the tokens (approval-token.ts, which needs zod), so opening a backend does not load the schemas.
 */
export const MIN_KEY_BYTES = 32;
/** Where the approval signing key comes from; read once per process. */
export type SigningKeySource = () => Promise<Buffer>;

export { SIGNING_KEY_FILE_ENV, SIGNING_KEY_SECRET_ENV };

/**
 * The local key: 32 random bytes in a file beside the database, created on first use with mode 0600.
 * Created with the exclusive flag, so two processes starting together agree on one key.
 */
export function localSigningKey(path: string): SigningKeySource {
  let key: Buffer | undefined;
  return async () => {
    if (key) return key;
    makeDir(dirname(path));
    try {
      writeFileSync(path, randomBytes(MIN_KEY_BYTES).toString('base64'), { flag: 'wx', mode: 0o600 });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    chmodSync(path, 0o600);
    key = decodeKey(readFileSync(path, 'utf8'), path);
    return key;
  };
}

/**
 * A key file someone made (STEPWISE_SIGNING_KEY_FILE on the AWS backend), read at once, so a missing or
 * short key stops the process that names it before it takes any work. Unlike the local key it is never
 * created here: the worker that signs a link and the API that checks it may run on two hosts, and a key
 * made on each would turn every link into a forgery.
 */
export function fileSigningKey(path: string): SigningKeySource {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new InvalidInputError(code === 'ENOENT'
      ? `the approval signing key file ${path} (${SIGNING_KEY_FILE_ENV}) does not exist: make it once with \`head -c 32 /dev/urandom | base64 > ${path}\` and give every worker and API process the same file`
      : `cannot read the approval signing key file ${path} (${SIGNING_KEY_FILE_ENV}): ${code ?? (error as Error).message}`);
  }
  const key = decodeKey(text, path);
  return () => Promise.resolve(key);
}

/** A key kept as base64 text (in a file or a Secrets Manager secret). */
export function decodeKey(text: string, where: string): Buffer {
  const key = Buffer.from(text.trim(), 'base64');
  if (key.length < MIN_KEY_BYTES) throw new InvalidInputError(`the approval signing key in ${where} must be at least ${MIN_KEY_BYTES} bytes of base64`);
  return key;
}
