/**
 * How long the stepwise command takes to start, as a user runs it: the built package (dist/, no
 * TypeScript loader), `--help` and `status` on an empty SQLite file, each next to a bare `node -e ""`
 * measured in the same run (interleaved, so load on the machine hits all alike). Also the same commands
 * from the sources in a checkout (through tsx), for comparison.
 *
 *   node --import tsx bench/cli-start.ts [runs]
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, symlinkSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchCounts } from './args-support.ts';
import { fmt, median, tempDir } from './support.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const [RUNS] = benchCounts([{ name: 'runs', fallback: 21 }]) as [number];

/** The package as npm would install it: dist/, bin/ and package.json, its dependencies beside it (emitted without the type check, which is npm test's). */
function stagePackage(dir: string): string {
  const pkg = join(dir, 'stepwise');
  mkdirSync(pkg);
  const build = spawnSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(ROOT, 'tsconfig.build.json'), '--outDir', join(pkg, 'dist'), '--noCheck'], { stdio: 'inherit' });
  if (build.status !== 0) throw new Error('the build failed');
  cpSync(join(ROOT, 'bin'), join(pkg, 'bin'), { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
  symlinkSync(join(ROOT, 'node_modules'), join(pkg, 'node_modules'));
  return join(pkg, 'bin/stepwise.js');
}

/**
 * Wall time of one run, and its CPU time (user + system, all threads) from /usr/bin/time where there is
 * one: on a shared machine the wall time includes waiting for a core, the CPU time does not.
 */
function measure(args: string[], env: NodeJS.ProcessEnv): { wall: number; cpu?: number } {
  const timed = existsSync(TIME) ? [TIME, ['-f', 'cpu %U %S', process.execPath, ...args]] as const : [process.execPath, args] as const;
  const t = process.hrtime.bigint();
  const r = spawnSync(timed[0], timed[1], { env, stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8' });
  const wall = Number(process.hrtime.bigint() - t) / 1e6;
  if (r.status !== 0) throw new Error(`${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  const cpu = /cpu ([\d.]+) ([\d.]+)\s*$/.exec(r.stderr);
  return cpu ? { wall, cpu: (Number(cpu[1]) + Number(cpu[2])) * 1000 } : { wall };
}
const TIME = '/usr/bin/time';

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
  measure([built, 'init'], env); // the empty db (status reads one; it makes none)
  for (const [, args] of cases) measure(args, env); // warm the file cache, fill tsx's cache
  const times = new Map(cases.map(([name]) => [name, { wall: [] as number[], cpu: [] as number[] }]));
  for (let i = 0; i < RUNS; i++) {
    for (const [name, args] of cases) {
      const m = measure(args, env);
      times.get(name)!.wall.push(m.wall);
      if (m.cpu !== undefined) times.get(name)!.cpu.push(m.cpu);
    }
  }
  const base = times.get('node -e ""')!;
  const baseWall = median(base.wall);
  const baseCpu = base.cpu.length ? median(base.cpu) : undefined;
  console.log(`start to exit, median of ${RUNS} runs each, interleaved; wall time (min), and CPU time (user + system) where /usr/bin/time is there`);
  for (const [name] of cases) {
    const { wall, cpu } = times.get(name)!;
    const w = median(wall);
    const c = cpu.length ? median(cpu) : undefined;
    const over = name.startsWith('node') ? 'baseline' : `+${fmt(w - baseWall, 0)} ms wall${c !== undefined && baseCpu !== undefined ? `, +${fmt(c - baseCpu, 0)} ms CPU` : ''} over bare node`;
    console.log(`${name.padEnd(36)} ${fmt(w, 0).padStart(5)} ms (min ${fmt(Math.min(...wall), 0).padStart(4)})${c !== undefined ? `  CPU ${fmt(c, 0).padStart(4)} ms` : ''}  ${over}`);
  }
  console.log(`load average while measuring: ${loadavg().map((l) => l.toFixed(2)).join(' ')} on ${availableParallelism()} cores`);
} finally {
  cleanup();
}
