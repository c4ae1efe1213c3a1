import { chmodSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { signApproval, verifyApproval } from '../../lib/waits/approval-token.ts';
import { fileSigningKey, keysOf, localSigningKey, type SigningKeySource } from '../../lib/waits/signing-key.ts';

const claim = { runId: 'run', waitId: 'wait-1', approver: 'ops@example.com', expiresAt: 10_000 };
let dir: string;
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** A link the source signs now, and whether the keys a source reads (a process started later) accept `link`. */
const signWith = async (source: SigningKeySource) => signApproval(claim, keysOf(await source()).signing);
const accepts = async (source: SigningKeySource, link: string) => verifyApproval(link, keysOf(await source()).accepted, 1_000).ok;

describe('rotating the approval signing key: the replaced key, kept beside the file as .previous, still checks links', () => {
  it('the local key: moved to signing.key.previous, a new one is made; links of both work, until .previous is removed', async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-rotate-'));
    const path = join(dir, 'signing.key');
    const old = await signWith(localSigningKey(path));
    renameSync(path, `${path}.previous`);
    // Processes started after the rotation (each reads the key once).
    const rotated = localSigningKey(path);
    const fresh = await signWith(rotated);
    expect(fresh).not.toBe(old);
    expect(await accepts(rotated, old)).toBe(true);
    expect(await accepts(rotated, fresh)).toBe(true);
    // A link no key of the deployment signed is refused as before.
    expect(verifyApproval(signApproval(claim, Buffer.alloc(32, 5)), keysOf(await rotated()).accepted, 1_000)).toMatchObject({ ok: false, reason: 'bad-signature' });
    rmSync(`${path}.previous`);
    const after = localSigningKey(path);
    expect(await accepts(after, old)).toBe(false);
    expect(await accepts(after, fresh)).toBe(true);
  });

  it('a key file (STEPWISE_SIGNING_KEY_FILE): the same, and a .previous that holds no key is refused by name', async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-rotate-'));
    const path = join(dir, 'approvals.key');
    writeFileSync(path, Buffer.alloc(32, 1).toString('base64'), { mode: 0o600 });
    const old = await signWith(fileSigningKey(path));
    renameSync(path, `${path}.previous`);
    writeFileSync(path, Buffer.alloc(32, 2).toString('base64'), { mode: 0o600 });
    const rotated = fileSigningKey(path);
    expect(await accepts(rotated, old)).toBe(true);
    expect(await accepts(rotated, await signWith(rotated))).toBe(true);
    expect(keysOf(await rotated()).signing.equals(Buffer.alloc(32, 2))).toBe(true);
    // Anyone who reads the replaced key can forge links the deployment takes: its mode is warned of too.
    const warned: string[] = [];
    chmodSync(`${path}.previous`, 0o644);
    fileSigningKey(path, { warn: (_fields, message) => warned.push(message) });
    expect(warned).toEqual([expect.stringContaining(`the approval signing key file ${path}.previous (STEPWISE_SIGNING_KEY_FILE, the key a rotation replaced) has mode 0644`)]);
    writeFileSync(`${path}.previous`, 'short');
    expect(() => fileSigningKey(path)).toThrow(`the approval signing key in ${path}.previous must be at least 32 bytes of base64: put the replaced key back in it, or remove it`);
  });
});
