import { randomBytes, randomUUID } from 'node:crypto';
import { chmodSync, existsSync, linkSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { InvalidInputError } from '../core/errors.ts';
import { SIGNING_KEY_FILE_ENV, SIGNING_KEY_SECRET_ENV } from '../settings.ts';
import { makeDir } from '../make-dir.ts';

/**
 * At least 32 bytes of key: HMAC-SHA256 gains nothing from more, and less is guessable. Kept here, not
 * with the tokens (approval-token.ts, which needs zod), so opening a backend does not load the schemas.
 */
export const MIN_KEY_BYTES = 32;
/**
 * The key that signs new approval links, and every key a link may carry: the signing one first, then the
 * one a rotation replaced, so links emailed before the rotation still work until they expire.
 */
export interface SigningKeys {
  signing: Buffer;
  accepted: readonly Buffer[];
}

/** Where the approval signing key comes from; read once per process. A bare key is accepted alone. */
export type SigningKeySource = () => Promise<Buffer | SigningKeys>;

export function keysOf(keys: Buffer | SigningKeys): SigningKeys {
  return Buffer.isBuffer(keys) ? { signing: keys, accepted: [keys] } : keys;
}

/** The suffix of the file beside a key file that holds the key it replaced (a rotation). */
export const PREVIOUS_SUFFIX = '.previous';

/**
 * `signing`, with the key a rotation left beside its file (`path`.previous), if there is one: a rotation
 * moves the key file there and puts a new key in its place (the local key is made anew on first use), and
 * the old key then only checks links, until the file is removed once they have all expired.
 */
function withPrevious(signing: Buffer, path: string): SigningKeys {
  const previousPath = `${path}${PREVIOUS_SUFFIX}`;
  let text: string;
  try {
    text = readFileSync(previousPath, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { signing, accepted: [signing] };
    throw new InvalidInputError(`cannot read the approval signing key a rotation replaced, ${previousPath}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
  const previous = decodeKey(text, previousPath, 'put the replaced key back in it, or remove it (links signed with that key then show "Invalid link")');
  return { signing, accepted: previous.equals(signing) ? [signing] : [signing, previous] };
}

export { SIGNING_KEY_FILE_ENV, SIGNING_KEY_SECRET_ENV };

/**
 * The local key: 32 random bytes in a file beside the database, created on first use with mode 0600.
 * Written whole under another name, then linked into place, which fails if a key got there first: two
 * processes starting together agree on one key. Created with the exclusive flag in place, the file was
 * there empty between its creation and its write, and a process starting then read "no key" and failed
 * (test/waits/signing-key-race.test.ts).
 */
export function localSigningKey(path: string): SigningKeySource {
  let key: SigningKeys | undefined;
  return async () => {
    if (key) return key;
    makeDir(dirname(path));
    if (!existsSync(path)) createKey(path);
    chmodSync(path, 0o600);
    // One left empty or short (older code's write cut by a full disk, an edit) blocked every process on the
    // file with no word of what to do: the local key is made again once removed.
    const signing = decodeKey(readFileSync(path, 'utf8'), path, `remove it, with every process on the database stopped, and a new key is made (approval links already emailed then show "Invalid link" unless the old key is kept as ${path}${PREVIOUS_SUFFIX}: answer those with stepwise approve)`);
    key = withPrevious(signing, path);
    return key;
  };
}

function createKey(path: string): void {
  const partial = join(dirname(path), `.signing-${randomUUID()}.tmp`);
  try {
    // Inside the try: a write the full disk cuts short leaves no partial key behind.
    writeFileSync(partial, randomBytes(MIN_KEY_BYTES).toString('base64'), { flag: 'wx', mode: 0o600 });
    linkSync(partial, path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return;
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP' && code !== 'ENOSYS') throw error;
    // A file system that keeps no links (some network shares): the exclusive create in place, whose empty
    // moment another process may see, is the best it offers.
    try {
      writeFileSync(path, readFileSync(partial), { flag: 'wx', mode: 0o600 });
    } catch (fallback) {
      if ((fallback as NodeJS.ErrnoException).code !== 'EEXIST') throw fallback;
    }
  } finally {
    rmSync(partial, { force: true });
  }
}

/**
 * A key file someone made (STEPWISE_SIGNING_KEY_FILE on the AWS backend), read at once, so a missing or
 * short key stops the process that names it before it takes any work. Unlike the local key it is never
 * created here: the worker that signs a link and the API that checks it may run on two hosts, and a key
 * made on each would turn every link into a forgery.
 */
export function fileSigningKey(path: string, options: { warn?: (fields: Record<string, unknown>, message: string) => void } = {}): SigningKeySource {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new InvalidInputError(code === 'ENOENT'
      ? `the approval signing key file ${path} (${SIGNING_KEY_FILE_ENV}) does not exist: make it once with \`head -c 32 /dev/urandom | base64 > ${path}\` and give every worker and API process the same file`
      : `cannot read the approval signing key file ${path} (${SIGNING_KEY_FILE_ENV}): ${code ?? (error as Error).message}`);
  }
  const signing = decodeKey(text, path, `write one with \`head -c 32 /dev/urandom | base64 > ${path}\` and give every worker and API process the same file`);
  const key = withPrevious(signing, path);
  // Warned, not refused: a Kubernetes secret volume is 0644 unless its defaultMode says otherwise, and a
  // refusal would stop workers that ran yesterday. Anyone who reads either key can forge approval links.
  for (const file of key.accepted.length > 1 ? [path, `${path}${PREVIOUS_SUFFIX}`] : [path]) {
    const mode = statSync(file).mode & 0o777;
    if (!(mode & EXPOSED_BITS)) continue;
    const octal = `0${mode.toString(8)}`;
    options.warn?.({ event: 'signing-key-exposed', path: file, mode: octal }, `the approval signing key file ${file} (${SIGNING_KEY_FILE_ENV}${file === path ? '' : ', the key a rotation replaced'}) has mode ${octal}: other users of this host can ${mode & 0o022 ? 'change' : 'read'} it, and whoever reads it can forge approval links; chmod 600 ${file} (a Kubernetes secret volume: defaultMode 0400)`);
  }
  return () => Promise.resolve(key);
}

/** Others' read, and anyone's write but the owner's: a key file's modes that hand the key to others. */
const EXPOSED_BITS = 0o026;

/** A key kept as base64 text (in a file or a Secrets Manager secret). */
export function decodeKey(text: string, where: string, fix?: string): Buffer {
  const key = Buffer.from(text.trim(), 'base64');
  if (key.length < MIN_KEY_BYTES) throw new InvalidInputError(`the approval signing key in ${where} must be at least ${MIN_KEY_BYTES} bytes of base64${fix ? `: ${fix}` : ''}`);
  return key;
}
