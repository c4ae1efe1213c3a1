import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { keysOf, localSigningKey } from '../../lib/waits/signing-key.ts';

/**
 * A file write is an open and then a write: `during`, once set, runs between the two, as another process
 * starting at that moment would. Mocked for this file alone, which is why the test has a file of its own.
 */
const hook = vi.hoisted(() => ({ during: undefined as (() => void) | undefined }));
vi.mock('node:fs', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs')>();
  const writeFileSync = ((file: string, data: string | Buffer, options?: { flag?: string; mode?: number }) => {
    const during = hook.during;
    if (!during) return fs.writeFileSync(file, data, options);
    hook.during = undefined;
    const fd = fs.openSync(file, options?.flag ?? 'w', options?.mode);
    try {
      during();
      fs.writeSync(fd, typeof data === 'string' ? Buffer.from(data) : data);
    } finally {
      fs.closeSync(fd);
    }
  }) as typeof fs.writeFileSync;
  return { ...fs, default: { ...fs, writeFileSync }, writeFileSync };
});

describe('the local signing key, made by two processes at once', () => {
  it('the one that starts while the other writes the key reads that key, never the file still empty', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stepwise-key-'));
    try {
      const path = join(dir, 'signing.key');
      let other: Promise<Buffer | Error> | undefined;
      hook.during = () => {
        other = localSigningKey(path)().then((k) => keysOf(k).signing, (error: Error) => error);
      };
      const first = keysOf(await localSigningKey(path)()).signing;
      const second = await other!;
      // It was "the approval signing key in .../signing.key must be at least 32 bytes of base64".
      expect(second).toBeInstanceOf(Buffer);
      expect((second as Buffer).equals(first)).toBe(true);
      expect(first.length).toBe(32);
      // Nothing left beside it but the key.
      expect(readdirSync(dir)).toEqual(['signing.key']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
