import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

const db = tempDb();
afterAll(() => db.cleanup());

/** The command as a shell runs it, with a timeout: a hang is a failure, not a test that never ends. */
async function shell(script: string, env: Record<string, string> = {}): Promise<{ code: number | null; out: string; err: string }> {
  const child = spawn('sh', ['-c', script], { env: { ...process.env, STEPWISE_DB: db.path, ...env } });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => { out += d; });
  child.stderr.on('data', (d: Buffer) => { err += d; });
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  const [code] = await once(child, 'exit') as [number | null];
  clearTimeout(timer);
  return { code, out, err };
}

describe('the stepwise command under the conditions of a real deployment', () => {
  it('started in a directory that was deleted, says so and exits 2, where it waited forever', async () => {
    const gone = join(db.path, '..', 'release-1');
    mkdirSync(gone);
    const r = await shell(`cd '${gone}' && rmdir '${gone}' && exec '${process.execPath}' '${BIN}' status`);
    expect(r).toEqual({ code: 2, out: '', err: 'stepwise: the current directory no longer exists (ENOENT): cd to one that does and run the command again\n' });
  });

  it('with stdout on a full disk, says so in one line and exits 1, where it threw a stack trace', async () => {
    expect((await shell(`exec '${process.execPath}' '${BIN}' init`)).code).toBe(0);
    // /dev/full refuses every write with ENOSPC, as a redirect to a file on a full disk does.
    for (const command of ['status', '--help']) {
      const r = await shell(`exec '${process.execPath}' '${BIN}' ${command} > /dev/full`);
      expect(r).toEqual({ code: 1, out: '', err: 'stepwise: cannot write to stdout: ENOSPC: no space left on device, write\n' });
    }
    // stderr full as well: the code the error line had set is kept.
    const unknown = await shell(`exec '${process.execPath}' '${BIN}' status no-such-run 2> /dev/full`);
    expect(unknown.code).toBe(2);
  });
});
