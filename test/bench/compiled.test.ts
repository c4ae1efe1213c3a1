import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from '../support/cli.ts';

/**
 * bench/compiled.mjs in a repository of its own making: lib/ and functions/ with a source and a compiled
 * file each saying which it is, so what a bench would import is visible in what it prints.
 */
const work = mkdtempSync(join(tmpdir(), 'stepwise-compiled-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function repository(name: string, built: boolean): string {
  const root = join(work, name);
  const write = (path: string, text: string) => {
    mkdirSync(join(root, path, '..'), { recursive: true });
    writeFileSync(join(root, path), text);
  };
  mkdirSync(join(root, 'bench'), { recursive: true });
  copyFileSync(join(ROOT, 'bench/compiled.mjs'), join(root, 'bench/compiled.mjs'));
  // Sources that would fail if loaded: plain node cannot run them, and they say so.
  write('lib/engine/advance.ts', 'throw new Error("the source was loaded");');
  write('functions/worker.ts', 'throw new Error("the source was loaded");');
  write('test/support/helper.mjs', 'export const where = "test helper, as it is";');
  if (built) {
    write('dist/lib/engine/advance.js', 'export const where = "dist/lib/engine/advance.js";');
    write('dist/functions/worker.js', 'export const where = "dist/functions/worker.js";');
  }
  write('bench/main.mjs', [
    "import { where as engine } from '../lib/engine/advance.ts';",
    "import { where as worker } from '../functions/worker.ts';",
    "import { where as helper } from '../test/support/helper.mjs';",
    'console.log(JSON.stringify([engine, worker, helper]));',
  ].join('\n'));
  return root;
}

const bench = (root: string) => spawnSync(process.execPath, ['--import', join(root, 'bench/compiled.mjs'), join(root, 'bench/main.mjs')], { encoding: 'utf8' });

describe('bench/compiled.mjs', () => {
  it("sends imports of lib/ and functions/ to their compiled files in dist/, and leaves the rest as it is", () => {
    const r = bench(repository('built', true));
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toEqual(['dist/lib/engine/advance.js', 'dist/functions/worker.js', 'test helper, as it is']);
  });

  it('refuses to run without dist/, saying how to build it, instead of measuring the sources', () => {
    const r = bench(repository('unbuilt', false));
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('dist/ is not built; run `npm run build` first');
    expect(r.stdout).toBe('');
  });
});
