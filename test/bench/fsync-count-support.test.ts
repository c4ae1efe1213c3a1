import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cannotTrace, countSyncCalls, syncCalls } from '../../bench/fsync-count-support.ts';

/** Why the machine cannot run the traced test, said in its name when it cannot (it needs strace: npm run setup). */
const why = cannotTrace();
const dir = mkdtempSync(join(tmpdir(), 'fsync-count-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('bench/fsync-count-support.ts', () => {
  it('sums the calls column of the sync calls in a strace summary, errors column or not, and nothing else', () => {
    const summary = [
      '% time     seconds  usecs/call     calls    errors syscall',
      '------ ----------- ----------- --------- --------- ----------------',
      ' 71.02    0.097474          64      1518         1 fsync',
      ' 20.00    0.020000          50       400           fdatasync',
      '  8.98    0.010000          10      1000           pwrite64',
      '------ ----------- ----------- --------- --------- ----------------',
      '100.00    0.127474          43      2918         1 total',
    ].join('\n');
    expect(syncCalls(summary)).toBe(1918);
    expect(syncCalls('')).toBe(0);
  });

  it('says which line it cannot read instead of counting it as nothing', () => {
    expect(() => syncCalls(' 10.00    0.010000          64      many           fsync')).toThrow(/no call count in "10\.00 .* fsync"/);
  });

  it.skipIf(why)(`counts the fsyncs a real process makes${why ? ` (not run here: ${why})` : ''}`, () => {
    // Three fsyncs in the process, one fdatasync in a worker thread of it (strace -f follows threads).
    const code = "const fs = require('node:fs'); const { Worker } = require('node:worker_threads'); const fd = fs.openSync(process.argv[1], 'w');"
      + " for (let i = 0; i < 3; i++) { fs.writeSync(fd, 'x'); fs.fsyncSync(fd); }"
      + " new Worker('require(\"node:fs\").fdatasyncSync(require(\"node:worker_threads\").workerData)', { eval: true, workerData: fd });";
    expect(countSyncCalls([process.execPath, '-e', code, join(dir, 'file')], join(dir, 'summary.txt'))).toBe(4);
  });

  it.skipIf(why)(`says which command failed under strace${why ? ` (not run here: ${why})` : ''}`, () => {
    expect(() => countSyncCalls([process.execPath, '-e', 'process.exit(3)'], join(dir, 'failed.txt'))).toThrow(/-e process\.exit\(3\) under strace: exited 3/);
  });

  it('bench/fsync-count.ts refuses runs that are not many > few >= 1 before it counts anything, rather than dividing by 0', () => {
    const refusals: [string[], string][] = [
      [['2', '3'], 'many runs must be more than few, not 2 and 3'],
      [['2', '2'], 'many runs must be more than few, not 2 and 2'],
      [['6', '0'], 'few must be a whole number of at least 1, not "0"'],
      [['x', '1'], 'many must be a whole number of at least 2, not "x"'],
    ];
    for (const [args, why] of refusals) {
      const r = spawnSync(process.execPath, ['--import', 'tsx', 'bench/fsync-count.ts', ...args], { encoding: 'utf8' });
      expect(r.status).toBe(2);
      expect(r.stderr).toContain(why);
      expect(r.stderr).not.toContain('    at ');
      expect(r.stdout).not.toContain('fsync calls per step');
    }
  });
});
