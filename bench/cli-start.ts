/**
 * How long the stepwise command takes to start, as a user runs it: the built package (dist/, no
 * TypeScript loader), `--help` and `status` on an empty SQLite file, each next to a bare `node -e ""`
 * measured in the same run (interleaved, so load on the machine hits all alike). Also the same commands
 * from the sources in a checkout (through tsx), for comparison.
 *
 *   node --import tsx bench/cli-start.ts [runs]
 */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fmt, median, tempDir } from './support.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const RUNS = Number(process.argv[2] ?? 21);

/** The package as npm would install it: dist/, bin/ and package.json, its dependencies beside it. */
function stagePackage(dir: string): string {
  const pkg = join(dir, 'stepwise');
  mkdirSync(pkg);
  const build = spawnSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(ROOT, 'tsconfig.build.json'), '--outDir', join(pkg, 'dist')], { stdio: 'inherit' });
  if (build.status !== 0) throw new Error('the build failed');
  cpSync(join(ROOT, 'bin'), join(pkg, 'bin'), { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
  symlinkSync(join(ROOT, 'node_modules'), join(pkg, 'node_modules'));
  return join(pkg, 'bin/stepwise.js');
}

function timeMs(args: string[], env: NodeJS.ProcessEnv): number {
  const t = process.hrtime.bigint();
  const r = spawnSync(process.execPath, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
  const ms = Number(process.hrtime.bigint() - t) / 1e6;
  if (r.status !== 0) throw new Error(`${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return ms;
}

const { dir, cleanup } = tempDir();
try {
  const built = stagePackage(dir);
  const env = { ...process.env, STEPWISE_DB: join(dir, 'empty.db'), ANTHROPIC_API_KEY: '' };
  const cases: [string, string[]][] = [
    ['node -e ""', ['-e', '']],
    ['stepwise --help (built)', [built, '--help']],
    ['stepwise status (built, empty db)', [built, 'status']],
    ['stepwise --help (sources, tsx)', [join(ROOT, 'bin/stepwise.js'), '--help']],
    ['stepwise status (sources, tsx)', [join(ROOT, 'bin/stepwise.js'), 'status']],
  ];
  for (const [, args] of cases) timeMs(args, env); // warm the file cache, create the db, fill tsx's cache
  const times = new Map(cases.map(([name]) => [name, [] as number[]]));
  for (let i = 0; i < RUNS; i++) for (const [name, args] of cases) times.get(name)!.push(timeMs(args, env));
  const baseline = median(times.get('node -e ""')!);
  console.log(`start to exit, median of ${RUNS} runs each, interleaved`);
  for (const [name] of cases) {
    const xs = times.get(name)!;
    const m = median(xs);
    console.log(`${name.padEnd(36)} ${fmt(m, 0).padStart(5)} ms  (min ${fmt(Math.min(...xs), 0)})  ${name.startsWith('node') ? 'baseline' : `+${fmt(m - baseline, 0)} ms over bare node`}`);
  }
} finally {
  cleanup();
}
