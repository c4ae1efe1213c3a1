/**
 * The functions' bundles as the CDK construct makes them (infra/worker-bundle.ts: the same generated entries
 * and the same esbuild settings, through esbuild's API so the metafile says what each byte is): the size
 * of each, what dominates the worker's, and the cold import time of the worker bundle in fresh Node
 * processes. Figures, not assertions.
 *
 *   node --import tsx bench/worker-bundle.ts [agent module] [import runs]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import * as esbuild from 'esbuild';
import { describeAgent } from '../infra/agent-description.ts';
import { FUNCTION_FACTORIES, WORKER_BUNDLING, findLockFile, writeEntry, type FunctionKind } from '../infra/worker-bundle.ts';
import { benchCounts } from './args-support.ts';

const agentPath = process.argv[2] ?? 'examples/aws/agent.ts';
const [runs] = benchCounts([{ name: 'import runs', fallback: 9 }], ['agent module']) as [number];
const out = mkdtempSync(join(tmpdir(), 'stepwise-bundle-'));
const projectRoot = dirname(findLockFile());
const { exportName } = describeAgent(agentPath);

/** WORKER_BUNDLING as the esbuild options NodejsFunction passes on its command line. */
const options = (entry: string, outfile: string): esbuild.BuildOptions => ({
  entryPoints: [entry], outfile, bundle: true, platform: 'node', metafile: true, logLevel: 'warning',
  format: WORKER_BUNDLING.format, target: WORKER_BUNDLING.target, minify: WORKER_BUNDLING.minify, sourcemap: WORKER_BUNDLING.sourceMap,
  mainFields: [...WORKER_BUNDLING.mainFields], banner: { js: WORKER_BUNDLING.banner }, external: [...WORKER_BUNDLING.externalModules],
  // The construct's --alias arguments (pino's thread-stream stubbed), as esbuild's API takes them.
  alias: Object.fromEntries(Object.entries(WORKER_BUNDLING.esbuildArgs).map(([flag, path]) => [flag.slice('--alias:'.length), path])),
});

const group = (file: string): string => {
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(file)?.[1];
  if (!pkg) return 'stepwise (lib, functions) and the agent';
  if (/^@(aws-sdk|smithy|aws\/lambda-invoke-store)\/|^(fast-xml-parser|strnum|tslib|bowser|mnemonist|obliterator)$/.test(pkg)) return 'AWS SDK v3 and its dependencies';
  if (/^(pino|sonic-boom|thread-stream|safe-stable-stringify|quick-format-unescaped|atomic-sleep|on-exit-leak-free|real-require|process-warning|pino-std-serializers|@pinojs\/.*)$/.test(pkg)) return 'pino and its dependencies';
  return pkg;
};

try {
  const sizes: Record<string, number> = {};
  let workerFile = '';
  for (const kind of Object.keys(FUNCTION_FACTORIES) as FunctionKind[]) {
    const outfile = join(out, kind, 'index.mjs');
    const result = await esbuild.build(options(writeEntry(out, projectRoot, kind, agentPath, exportName), outfile));
    sizes[kind] = statSync(outfile).size;
    if (kind !== 'worker') continue;
    workerFile = outfile;
    const groups = new Map<string, number>();
    const [, output] = Object.entries(result.metafile!.outputs).find(([name]) => name.endsWith('index.mjs'))!;
    for (const [file, input] of Object.entries(output.inputs)) groups.set(group(file), (groups.get(group(file)) ?? 0) + input.bytesInOutput);
    const top = [...output.inputs ? Object.entries(output.inputs) : []].sort((a, b) => b[1].bytesInOutput - a[1].bytesInOutput).slice(0, 5);
    console.log(`worker bundle of ${agentPath}: ${sizes.worker} bytes minified`);
    for (const [name, bytes] of [...groups].sort((a, b) => b[1] - a[1]).slice(0, 8)) {
      console.log(`  ${String(bytes).padStart(8)}  ${(100 * bytes / sizes.worker!).toFixed(1).padStart(5)}%  ${name}`);
    }
    console.log('  largest modules:');
    for (const [file, input] of top) console.log(`  ${String(input.bytesInOutput).padStart(8)}  ${file.replace(/.*node_modules\//, '')}`);
  }
  console.log(`bundles (bytes): ${Object.entries(sizes).map(([k, v]) => `${k} ${v}`).join(', ')}`);

  const env = { PATH: process.env.PATH, TABLE_NAME: 't', BUCKET_NAME: 'b', QUEUE_URL: 'q', STEPWISE_CODE_VERSION: 'bench', AWS_REGION: 'us-east-1', AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' };
  const script = `const t = performance.now(); await import(${JSON.stringify(`file://${workerFile}`)}); console.log(performance.now() - t);`;
  const times = Array.from({ length: runs }, () => Number(execFileSync(process.execPath, ['--input-type=module', '-e', script], { env, encoding: 'utf8' }).trim()))
    .sort((a, b) => a - b);
  const baseline = Array.from({ length: runs }, () => Number(execFileSync(process.execPath, ['--input-type=module', '-e', "const t = performance.now(); await import('node:http'); console.log(performance.now() - t);"], { env, encoding: 'utf8' }).trim()))
    .sort((a, b) => a - b);
  const median = (xs: number[]) => xs[Math.floor(xs.length / 2)]!;
  console.log(`cold import of the worker bundle, ${runs} fresh processes: median ${median(times).toFixed(0)} ms (${times[0]!.toFixed(0)}-${times.at(-1)!.toFixed(0)}); importing node:http alone: median ${median(baseline).toFixed(1)} ms`);
} finally {
  rmSync(out, { recursive: true, force: true });
}
