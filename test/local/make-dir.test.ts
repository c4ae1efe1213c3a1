import { existsSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makeDir } from '../../lib/make-dir.ts';

// A path under /proc, where Node's own recursive mkdir loops forever, is tested through the CLI in a child
// process with a timeout (test/cli/cli.test.ts): a regression there would hang this process.
const root = mkdtempSync(join(tmpdir(), 'stepwise-make-dir-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('makeDir', () => {
  it('makes a directory and its missing parents, and is a no-op when it exists', () => {
    const dir = join(root, 'a', 'b', 'c');
    makeDir(dir);
    expect(statSync(dir).isDirectory()).toBe(true);
    makeDir(dir);
    makeDir(join(root, 'a'));
    expect(statSync(dir).isDirectory()).toBe(true);
  });

  it('fails once, naming the level, where a file stands in the path', () => {
    writeFileSync(join(root, 'file'), 'x');
    expect(() => makeDir(join(root, 'file', 'sub', 'dir'))).toThrow(`cannot make the directory ${join(root, 'file', 'sub')} (ENOTDIR)`);
    expect(existsSync(join(root, 'file', 'sub'))).toBe(false);
  });

  it('fails once under a symlink to nothing', () => {
    symlinkSync(join(root, 'nowhere'), join(root, 'dangling'));
    expect(() => makeDir(join(root, 'dangling', 'sub'))).toThrow(`cannot make the directory ${join(root, 'dangling', 'sub')} (ENOENT)`);
    expect(existsSync(join(root, 'nowhere'))).toBe(false);
  });
});
