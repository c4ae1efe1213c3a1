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
  copyFileSync(join(ROOT, 'bench/compiled-cli.mjs'), join(root, 'bench/compiled-cli.mjs'));
  // Sources that would fail if loaded: plain node cannot run them, and they say so.
  write('lib/engine/advance.ts', 'throw new Error("the source was loaded");');
  write('functions/worker.ts', 'throw new Error("the source was loaded");');
  write('test/support/helper.mjs', 'export const where = "test helper, as it is";');
  write('lib/cli/main.ts', 'throw new Error("the source was loaded");');
  if (built) {
    // The CLI a throughput worker runs: it says what it was given, and whose engine it shares.
    write('dist/lib/cli/main.js', [
      'export async function runCli() {',
      "  const { where } = await import('../engine/advance.js');",
      "  console.log(JSON.stringify(['dist/lib/cli/main.js', where, process.argv.slice(2)]));",
      '}',
    ].join('\n'));
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

  it('runs a bench worker process on the compiled CLI, with its arguments (bench/compiled-cli.mjs)', () => {
    const root = repository('cli', true);
    const r = spawnSync(process.execPath, ['--import', join(root, 'bench/compiled.mjs'), join(root, 'bench/compiled-cli.mjs'), 'worker', '--db', 'x.db'], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toEqual(['dist/lib/cli/main.js', 'dist/lib/engine/advance.js', ['worker', '--db', 'x.db']]);
  });

  it('refuses to run without dist/, saying how to build it, instead of measuring the sources', () => {
    const r = bench(repository('unbuilt', false));
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('dist/ is not built; run `npm run build` first');
    expect(r.stdout).toBe('');
  });
});
