import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../support/cli.ts';
import { matching, tracedRun } from '../support/import-trace.ts';

/**
 * stepwise as a user gets it: `npm pack` (which builds dist/ through prepack), the tarball installed into
 * a fresh project, a TypeScript agent there. The tarball is unpacked into node_modules/stepwise and its
 * declared dependencies are linked from this repository's install: `npm install` of the tarball would
 * fetch and compile better-sqlite3 (minutes, and a network the tests must not need). Linking only what
 * package.json declares still proves the declarations: the unpacked package resolves nothing else.
 */
const work = mkdtempSync(join(tmpdir(), 'stepwise-pack-'));
const app = join(work, 'app');
const modules = join(app, 'node_modules');
let files: string[] = [];

const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');
const bin = join(modules, '.bin/stepwise');
const env = { STEPWISE_DB: join(app, '.stepwise/stepwise.db'), ANTHROPIC_API_KEY: '', ANTHROPIC_API_KEY_SECRET_ID: '', STEPWISE_LOG_LEVEL: 'warn' };

/** What a failed child said, without its stack frames (vitest would try to map them to sources). */
const said = (text: string): string => text.split('\n').filter((line) => line.trim() && !/^\s+at /.test(line)).slice(0, 8).join('\n');

function run(command: string, args: string[], cwd = app) {
  const r = spawnSync(command, args, { cwd, encoding: 'utf8', timeout: 240_000, env: { ...process.env, ...env } });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

beforeAll(() => {
  const packed = JSON.parse(execFileSync('npm', ['pack', '--pack-destination', work, '--json'], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })) as { filename: string; files: { path: string }[] }[];
  files = packed[0]!.files.map((f) => f.path);
  mkdirSync(modules, { recursive: true });
  execFileSync('npm', ['init', '-y'], { cwd: app, stdio: 'ignore' });
  // What `npm install` would leave besides node_modules; the construct's bundling looks for it.
  writeFileSync(join(app, 'package-lock.json'), JSON.stringify({ name: 'app', version: '1.0.0', lockfileVersion: 3, requires: true, packages: { '': { name: 'app', version: '1.0.0' } } }, null, 2));
  execFileSync('tar', ['-xzf', join(work, packed[0]!.filename), '-C', modules]);
  execFileSync('mv', [join(modules, 'package'), join(modules, 'stepwise')]);
  const manifest = JSON.parse(readFileSync(join(modules, 'stepwise/package.json'), 'utf8')) as { dependencies: Record<string, string>; peerDependencies: Record<string, string>; bin: Record<string, string> };
  // The user's own tools besides stepwise's dependencies: TypeScript and Node's types, and the CDK
  // libraries stepwise/cdk expects the app to have (its peer dependencies).
  for (const name of [...Object.keys(manifest.dependencies), ...Object.keys(manifest.peerDependencies), 'typescript', '@types/node']) {
    const link = join(modules, name);
    mkdirSync(dirname(link), { recursive: true });
    symlinkSync(join(ROOT, 'node_modules', name), link);
  }
  mkdirSync(dirname(bin), { recursive: true });
  symlinkSync(join('..', 'stepwise', manifest.bin.stepwise!), bin);
  chmodSync(join(modules, 'stepwise', manifest.bin.stepwise!), 0o755);
  writeFileSync(join(app, 'agent.ts'), AGENT);
  writeFileSync(join(app, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, types: ['node'], skipLibCheck: false },
    files: ['agent.ts'],
  }, null, 2));
}, 240_000);
afterAll(() => rmSync(work, { recursive: true, force: true }));

const AGENT = `import { z } from 'zod';
import { defineAgent, tool, type ModelReply, type ToolContext } from 'stepwise';

const greet = tool({
  name: 'greet',
  description: 'Greets someone.',
  input: z.object({ name: z.string() }),
  sideEffect: false,
  run: (input, ctx: ToolContext) => \`hello \${input.name.toUpperCase()} at step \${ctx.step}\`,
});

export default defineAgent({
  name: 'packed',
  tools: [greet],
  offlineModel: () => ({
    name: 'packed-scripted',
    decide: async (request): Promise<ModelReply> => (request.step === 1
      ? { kind: 'tool', tool: 'greet', input: { name: 'npm' } }
      : { kind: 'done', summary: 'greeted once' }),
  }),
});
`;

/** An agent that asks for an approval (a run whose id ends in -ask) or refuses for good (any other run). */
const GATED_AGENT = `import { z } from 'zod';
import { PermanentError, defineAgent, requestApproval, tool, type ModelReply } from 'stepwise';

const drop = tool({
  name: 'drop_table',
  description: 'Drops a table.',
  input: z.object({ table: z.string() }),
  sideEffect: true,
  run: (input) => { throw new PermanentError(\`\${input.table} is not a table this agent may drop\`); },
});

export default defineAgent({
  name: 'gated',
  tools: [requestApproval({ approvers: ['ops@example.com'] }), drop],
  offlineModel: () => ({
    name: 'gated-scripted',
    decide: async (request): Promise<ModelReply> => (request.runId.endsWith('-ask')
      ? { kind: 'tool', tool: 'request_approval', input: { request: 'drop the source table?' } }
      : { kind: 'tool', tool: 'drop_table', input: { table: 'users' } }),
  }),
});
`;

describe('the packed package', () => {
  it('holds the build, the command and the README: no TypeScript sources, tests or benchmarks', () => {
    expect(files).toEqual(expect.arrayContaining(['package.json', 'README.md', 'bin/stepwise.js', 'dist/lib/index.js', 'dist/lib/index.d.ts', 'dist/lib/cli/main.js', 'dist/lib/local.js', 'dist/lib/aws.js']));
    expect(files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([]);
    expect(files.filter((f) => /^(lib|test|bench|examples|scripts)\//.test(f))).toEqual([]);
  });

  it('runs a TypeScript agent with npx stepwise run, from the compiled CLI, loading tsx only for the agent', () => {
    const r = tracedRun(bin, ['run', '--agent', 'agent.ts', '--goal', 'greet once'], { cwd: app, env });
    expect(r.code, said(r.err)).toBe(0);
    expect(r.out).toMatch(/step 1 {2}greet {2}ok/);
    expect(r.out).toContain('completed');
    const ours = r.urls.filter((u) => u.includes('/node_modules/stepwise/'));
    expect(ours.some((u) => u.includes('/node_modules/stepwise/dist/lib/cli/main.js'))).toBe(true);
    expect(ours.filter((u) => u.endsWith('.ts'))).toEqual([]);
    expect(r.packages.has('tsx')).toBe(true);

    const npx = run('npx', ['--no', 'stepwise', 'status']);
    expect(npx.code, said(npx.err)).toBe(0);
    expect(npx.out).toMatch(/\S+\s+completed\s+1\s+\d+\s+packed/);
  });

  it('waits for an approval and fails at once for a PermanentError thrown by an agent in a CommonJS package', () => {
    // `npm init` made this package CommonJS, so the agent's `import 'stepwise'` is a require that tsx
    // compiles into a second copy of the package: its WaitRequest and errors are not the CLI's classes.
    expect(JSON.parse(readFileSync(join(app, 'package.json'), 'utf8')).type ?? 'commonjs').toBe('commonjs');
    writeFileSync(join(app, 'gated.ts'), GATED_AGENT);
    const db = ['--db', join(app, '.stepwise/gated.db')]; // the other cases' file keeps one completed run
    const gated = run(bin, ['run', '--agent', 'gated.ts', '--goal', 'ask first', '--run-id', 'gated-ask', ...db]);
    expect(gated.code, said(gated.err)).toBe(0);
    expect(gated.out).toMatch(/waiting for approval by ops@example\.com/);
    const waiting = run(bin, ['status', 'gated-ask', '--json', ...db]);
    expect(JSON.parse(waiting.out)).toMatchObject({ status: 'waiting', step: 0 });

    const refused = run(bin, ['run', '--agent', 'gated.ts', '--goal', 'drop users', '--run-id', 'gated-drop', ...db]);
    expect(refused.out).not.toContain('will retry');
    const failed = run(bin, ['status', 'gated-drop', '--json', ...db]);
    expect(JSON.parse(failed.out)).toMatchObject({ status: 'failed', step: 0 });
    expect(failed.out).toContain('not a table this agent may drop');
  });

  it('starts without a TypeScript loader, an SDK or zod when the command needs none', () => {
    const status = tracedRun(bin, ['status'], { cwd: app, env });
    expect(status.code, said(status.err)).toBe(0);
    expect(matching(status.packages, ['tsx', 'esbuild', '@anthropic-ai/sdk', '@aws-sdk/', 'zod', 'pino', 'hono'])).toEqual([]);
    const help = tracedRun(bin, ['--help'], { cwd: app, env });
    expect(help.code).toBe(0);
    expect(matching(help.packages, ['tsx', 'better-sqlite3', 'zod'])).toEqual([]);
  });

  it('type-checks the agent against the installed declarations, which are real types, not any', () => {
    const ok = run(process.execPath, [TSC, '-p', 'tsconfig.json']);
    expect(ok.out + ok.err).toBe('');
    expect(ok.code).toBe(0);
    writeFileSync(join(app, 'wrong.ts'), AGENT.replace('input.name.toUpperCase()', 'input.name.toFixed(2)').replace("kind: 'done', summary", "kind: 'finished', summary"));
    const config = JSON.parse(readFileSync(join(app, 'tsconfig.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(app, 'tsconfig.wrong.json'), JSON.stringify({ ...config, files: ['wrong.ts'] }));
    const wrong = run(process.execPath, [TSC, '-p', 'tsconfig.wrong.json']);
    expect(wrong.code).not.toBe(0);
    expect(wrong.out).toContain("Property 'toFixed' does not exist on type 'string'");
    expect(wrong.out).toContain('"finished"');
  });

  it('exports only its entry points: internal modules cannot be imported', () => {
    const entry = run(process.execPath, ['--input-type=module', '-e', "const m = await import('stepwise'); const l = await import('stepwise/local'); console.log(typeof m.defineAgent, typeof m.tool, typeof m.PermanentError, typeof l.openLocalRuntime)"]);
    expect(entry.out.trim()).toBe('function function function function');
    const internal = run(process.execPath, ['--input-type=module', '-e', "await import('stepwise/dist/lib/core/state.js')"]);
    expect(internal.code).not.toBe(0);
    expect(internal.err).toContain('ERR_PACKAGE_PATH_NOT_EXPORTED');
  });

  it("runs the README's embedding example from the package, twice, with one run and one step to show for it", () => {
    // The example as the README has it, in an ES module project beside the app (top-level await).
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const section = readme.slice(readme.indexOf('### In a program of your own'));
    const example = /```ts\n([\s\S]*?)```/.exec(section)![1]!;
    const embed = join(app, 'embed');
    mkdirSync(embed, { recursive: true });
    writeFileSync(join(embed, 'package.json'), JSON.stringify({ name: 'embed', type: 'module', private: true }));
    writeFileSync(join(embed, 'agent.ts'), AGENT);
    writeFileSync(join(embed, 'main.ts'), example);
    writeFileSync(join(embed, 'tsconfig.json'), JSON.stringify({
      compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, allowImportingTsExtensions: true, types: ['node'] },
      files: ['main.ts'],
    }));
    const types = run(process.execPath, [TSC, '-p', 'tsconfig.json'], embed);
    expect(types.out + types.err).toBe('');
    for (let round = 0; round < 2; round += 1) {
      const r = run(process.execPath, ['--import', 'tsx', 'main.ts'], embed);
      expect(r.code, said(r.err)).toBe(0);
      expect(r.out.trim()).toBe('completed greeted once');
    }
    const status = run(bin, ['status', 'copy-1', '--json', '--db', join(embed, 'runs.db')]);
    expect(status.code, said(status.err)).toBe(0);
    expect(JSON.parse(status.out)).toMatchObject({ runId: 'copy-1', agent: 'packed', status: 'completed', step: 1 });
  });

  it("type-checks the README's agent with a synchronous copyRows, as the demo's better-sqlite3 one is", () => {
    // Its copy_batch wraps copyRows in ctx.once, whose type took only an effect returning a promise: a
    // synchronous effect ran, and tsc refused it (TS2739, 'missing then, catch ...').
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const section = readme.slice(readme.indexOf('An agent is a module that exports its tools:'));
    const example = /```ts\n([\s\S]*?)```/.exec(section)![1]!;
    expect(example).toContain('ctx.once(() => copyRows(input))');
    writeFileSync(join(app, 'readme-agent.ts'), `${example}
function copyRows(input: { afterId: number; limit: number }): { copied: number; lastId: number } {
  return { copied: input.limit, lastId: input.afterId + input.limit };
}
`);
    const config = JSON.parse(readFileSync(join(app, 'tsconfig.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(join(app, 'tsconfig.readme-agent.json'), JSON.stringify({ ...config, files: ['readme-agent.ts'] }));
    const types = run(process.execPath, [TSC, '-p', 'tsconfig.readme-agent.json']);
    expect(types.out + types.err).toBe('');
  });

  it("type-checks and runs the README's embedding example as a .mts file of a CommonJS package, as the README says to", () => {
    // Its `import agent from './agent.ts'` is then the CommonJS agent module's exports, { default: agent }:
    // openLocalEngine unwrapped them at run time, and its declared type refused them to tsc.
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const section = readme.slice(readme.indexOf('### In a program of your own'));
    expect(section).toContain('in a CommonJS package');
    const example = /```ts\n([\s\S]*?)```/.exec(section)![1]!;
    writeFileSync(join(app, 'embed-cjs.mts'), example.replace("dbPath: 'runs.db'", "dbPath: 'embed-cjs.db'"));
    const config = JSON.parse(readFileSync(join(app, 'tsconfig.json'), 'utf8')) as { compilerOptions: Record<string, unknown> };
    writeFileSync(join(app, 'tsconfig.embed-cjs.json'), JSON.stringify({
      compilerOptions: { ...config.compilerOptions, allowImportingTsExtensions: true }, files: ['embed-cjs.mts'],
    }));
    const types = run(process.execPath, [TSC, '-p', 'tsconfig.embed-cjs.json']);
    expect(types.out + types.err).toBe('');
    const r = run(process.execPath, ['--import', 'tsx', 'embed-cjs.mts']);
    expect(r.code, said(r.err)).toBe(0);
    expect(r.out.trim()).toBe('completed greeted once');
  });

  it('synthesizes a CDK app that uses the construct from stepwise/cdk', () => {
    writeFileSync(join(app, 'cdk-app.ts'), `import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { Stepwise } from 'stepwise/cdk';

// Bundling the functions (esbuild over the agent) is skipped: this checks the construct, not esbuild.
// An outdir in the project, as the cdk CLI gives one: without it the App leaves a folder in the temp folder.
const app = new App({ outdir: 'cdk.out', context: { 'aws:cdk:bundling-stacks': [] } });
const stack = new Stack(app, 'Packed');
new Stepwise(stack, 'Agent', { agentPath: 'agent.ts' }).addStackOutputs();
const template = Template.fromStack(stack).toJSON() as { Outputs: Record<string, unknown>; Resources: Record<string, { Type: string }> };
console.log(JSON.stringify({ outputs: Object.keys(template.Outputs).sort(), types: [...new Set(Object.values(template.Resources).map((r) => r.Type))].sort() }));
`);
    const synth = run(process.execPath, ['--import', 'tsx', 'cdk-app.ts']);
    expect(synth.code, said(synth.err)).toBe(0);
    const { outputs, types } = JSON.parse(synth.out.trim().split('\n').pop()!) as { outputs: string[]; types: string[] };
    expect(outputs).toEqual(expect.arrayContaining(['TableName', 'BucketName', 'QueueUrl', 'ApiUrl']));
    expect(types).toEqual(expect.arrayContaining(['AWS::DynamoDB::Table', 'AWS::S3::Bucket', 'AWS::SQS::Queue', 'AWS::Lambda::Function']));
  });
});
