import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import agent from '../../examples/aws/agent.ts';
import { decodeState } from '../../lib/core/codec.ts';
import { CODE_VERSION_ENV, METRIC_NAMES, METRICS_NAMESPACE } from '../../lib/settings.ts';
import { createTestResources, queueDepth, startTestRun, type TestResources } from '../aws/aws-fixtures.ts';
import { toSqsRecord } from '../aws/lambda-harness.ts';
import { startMessagesServer, toolUse, type MessagesServer } from '../support/messages-server.ts';
import { startSecretsServer } from './secrets-server.ts';

/**
 * The one real synth: `npm run synth` (the CDK CLI, offline, with no AWS credentials) bundles the
 * project's app for real. Then the worker bundle it made is loaded in a fresh Node process with the
 * environment the template gives the worker (each reference resolved to a local resource), and its
 * handler is driven with an SQS event against DynamoDB Local and fauxqs to one completed step, the model
 * being the local Messages API server and the key coming from a local Secrets Manager stand-in.
 */

type Json = Record<string, any>;
// The target: under 1 MB minified. It is 893,634 B (the example agent's, 2026-12-07), with pino's
// transports stubbed (infra/no-pino-transports.cjs) and the SDK's credential chain cut to the environment
// (infra/lambda-credentials.mjs: 1,000,147 B before it). The rest of pino (42 KB) is the next cut if it grows.
const WORKER_BUNDLE_LIMIT = 1_000_000;
let outdir: string;
let synth: { code: number | null; stdout: string; stderr: string; ms: number };
let template: Json;

function run(command: string, args: string[], options: { env: NodeJS.ProcessEnv; cwd?: string; input?: string }): Promise<{ code: number | null; stdout: string; stderr: string; ms: number }> {
  const started = performance.now();
  return new Promise((resolve) => {
    const child = execFile(command, args, { env: options.env, cwd: options.cwd ?? process.cwd(), maxBuffer: 64 * 2 ** 20 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr, ms: performance.now() - started });
    });
    if (options.input !== undefined) child.stdin!.end(options.input);
  });
}

/** The machine's environment without any AWS or CDK setting, and a home with no AWS profile. */
function bareEnv(home: string): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(AWS_|CDK_)/.test(k)));
  return { ...env, HOME: home };
}

const fnId = (handlerDescription: RegExp) => Object.entries(template.Resources as Json)
  .find(([, r]) => r.Type === 'AWS::Lambda::Function' && handlerDescription.test(r.Properties.Description))![0];
const assetDir = (functionId: string) => join(outdir, `asset.${(template.Resources[functionId].Properties.Code.S3Key as string).replace(/\.zip$/, '')}`);

beforeAll(async () => {
  outdir = mkdtempSync(join(tmpdir(), 'stepwise-synth-'));
  const home = mkdtempSync(join(tmpdir(), 'stepwise-home-'));
  synth = await run('npm', ['run', 'synth', '--', '--output', outdir], { env: bareEnv(home) });
  // A figure, not an assertion: printed for the README.
  console.log(`npm run synth: ${(synth.ms / 1000).toFixed(1)} s`);
  if (synth.code === 0) template = JSON.parse(readFileSync(join(outdir, 'Stepwise.template.json'), 'utf8')) as Json;
  rmSync(home, { recursive: true, force: true });
}, 600_000);

afterAll(() => {
  if (outdir) rmSync(outdir, { recursive: true, force: true });
});

describe('npm run synth', () => {
  it('synthesizes offline with no credentials, cdk-nag passing, with the outputs the CLI reads and one bundle per function', () => {
    expect(synth.code, synth.stderr.slice(-3000)).toBe(0);
    expect(Object.keys(template.Outputs).sort()).toEqual(['AgentNames', 'ApiKeySecretArn', 'ApiUrl', 'BucketName', 'QueueUrl', 'TableName']);
    expect(Object.keys(template.Parameters)).toEqual(expect.arrayContaining(['SenderEmail', 'ApproverEmail']));
    const sizes: Record<string, number> = {};
    for (const [kind, description] of [['worker', /one step/], ['api', /HTTP API/], ['events', /EventBridge/], ['sweeper', /re-drives/]] as const) {
      sizes[kind] = statSync(join(assetDir(fnId(description)), 'index.mjs')).size;
    }
    console.log(`bundle sizes (bytes, minified): ${JSON.stringify(sizes)}`);
    expect(sizes.worker).toBeLessThan(WORKER_BUNDLE_LIMIT);
    // What each function does not use stays out of its bundle: the SQLite runtime everywhere, the approval
    // page outside the API, the Anthropic client outside the worker.
    const bundle = (description: RegExp) => readFileSync(join(assetDir(fnId(description)), 'index.mjs'), 'utf8');
    const [worker, api, sweeper] = [bundle(/one step/), bundle(/HTTP API/), bundle(/re-drives/)];
    const page = 'name="decision" value="approve"';
    expect(api).toContain(page);
    expect(worker).not.toContain(page);
    expect(worker).toContain('api.anthropic.com');
    expect(sweeper).not.toContain('api.anthropic.com');
    for (const b of [worker, api, sweeper]) expect(b).not.toContain('better_sqlite3.node');
    // pino's transports (thread-stream, a worker thread) are never started: a stub stands in for them, and
    // the bundled worker below still logs and completes its step.
    for (const b of [worker, api, sweeper]) {
      expect(b).not.toContain('thread-stream-worker');
      expect(b).toContain('stepwise bundles no pino transports');
    }
  });
});

describe('the bundled worker', () => {
  let resources: TestResources | undefined;
  let messages: MessagesServer | undefined;
  let secrets: Awaited<ReturnType<typeof startSecretsServer>> | undefined;
  afterAll(async () => {
    resources?.close();
    await messages?.stop();
    await secrets?.stop();
  });

  it('loaded in a fresh Node process with the construct\'s environment, completes one step against DynamoDB Local and fauxqs', async () => {
    expect(synth.code).toBe(0);
    resources = await createTestResources('bundle');
    messages = await startMessagesServer();
    messages.otherwise(toolUse('draft_notes', { version: '1.2.0', changes: ['Faster resumes', 'Approval emails'] }));
    const secretIds = (type: RegExp) => Object.entries(template.Resources as Json).find(([id, r]) => r.Type === 'AWS::SecretsManager::Secret' && type.test(id))![0];
    const apiKeySecret = secretIds(/AnthropicApiKey/);
    const signingSecret = secretIds(/SigningKey/);
    secrets = await startSecretsServer({ [apiKeySecret]: 'sk-local-test', [signingSecret]: Buffer.alloc(32, 7).toString('base64') });

    // The worker's environment as the template gives it, every reference resolved to a local resource.
    const workerId = fnId(/one step/);
    const vars = template.Resources[workerId].Properties.Environment.Variables as Json;
    const parameters: Record<string, string> = { SenderEmail: 'agent@example.com', ApproverEmail: 'approver@example.com' };
    const resolveValue = (name: string, value: unknown): string => {
      if (typeof value === 'string') return value;
      const v = value as Json;
      if (v.Ref && parameters[v.Ref]) return parameters[v.Ref]!;
      const type = v.Ref ? template.Resources[v.Ref]?.Type : undefined;
      if (type === 'AWS::DynamoDB::Table') return resources!.tableName;
      if (type === 'AWS::S3::Bucket') return resources!.bucketName;
      if (type === 'AWS::SQS::Queue') return resources!.queueUrl;
      if (type === 'AWS::SecretsManager::Secret') return v.Ref as string;
      if (v['Fn::GetAtt']?.[1] === 'ApiEndpoint') return 'http://127.0.0.1:9';
      if (v.Ref === 'AWS::StackName') return 'release-notes-prod';
      throw new Error(`the worker's ${name} is ${JSON.stringify(value)}: the test cannot give it a local value`);
    };
    const workerEnv = Object.fromEntries(Object.entries(vars).map(([name, value]) => [name, resolveValue(name, value)]));

    const runtime = resources.runtime();
    const runId = await startTestRun(runtime, agent, 'bundle-run', 'Draft the release notes for 1.2.0 and publish them once approved.');
    const { Messages: received = [] } = await resources.clients.sqs.send(new ReceiveMessageCommand({
      QueueUrl: resources.queueUrl, MaxNumberOfMessages: 1, WaitTimeSeconds: 1, VisibilityTimeout: 60,
      MessageSystemAttributeNames: ['All'], MessageAttributeNames: ['All'],
    }));
    expect(received).toHaveLength(1);
    const eventFile = join(outdir, 'event.json');
    writeFileSync(eventFile, JSON.stringify({ Records: [toSqsRecord(received[0]!, resources.queueUrl)] }));
    const runner = join(outdir, 'run-handler.mjs');
    writeFileSync(runner, [
      "import { readFileSync } from 'node:fs';",
      "import { pathToFileURL } from 'node:url';",
      'const [bundle, eventFile] = process.argv.slice(2);',
      "const event = JSON.parse(readFileSync(eventFile, 'utf8'));",
      'const t0 = performance.now();',
      'const mod = await import(pathToFileURL(bundle).href);',
      'const importMs = performance.now() - t0;',
      "const result = await mod.handler(event, { awsRequestId: 'bundle-request-1', getRemainingTimeInMillis: () => 360000 });",
      "process.stdout.write('\\nRESULT ' + JSON.stringify({ result, importMs, rssMb: process.memoryUsage().rss / 2 ** 20 }) + '\\n');",
    ].join('\n'));

    const local = Object.fromEntries(Object.entries(process.env).filter(([k]) => /^AWS_(ENDPOINT_URL_|REGION$|ACCESS_KEY_ID$|SECRET_ACCESS_KEY$)/.test(k)));
    const child = await run(process.execPath, [runner, join(assetDir(workerId), 'index.mjs'), eventFile], {
      env: {
        PATH: process.env.PATH, ...local, ...workerEnv,
        AWS_ENDPOINT_URL_SECRETS_MANAGER: secrets.endpoint, ANTHROPIC_BASE_URL: messages.url,
        // As Lambda sets it: the worker then writes its metrics as EMF on stdout.
        AWS_LAMBDA_FUNCTION_NAME: 'stepwise-worker', AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
      },
    });
    expect(child.code, child.stderr.slice(-3000)).toBe(0);
    const line = child.stdout.split('\n').find((l) => l.startsWith('RESULT '))!;
    const { result, importMs, rssMb } = JSON.parse(line.slice(7)) as { result: Json; importMs: number; rssMb: number };
    console.log(`bundled worker: import ${importMs.toFixed(0)} ms, RSS after one step ${rssMb.toFixed(0)} MB`);
    expect(result).toEqual({ batchItemFailures: [] });

    const state = decodeState((await runtime.store.load(runId))!);
    expect(state).toMatchObject({ status: 'running', step: 1 });
    expect(state.steps[0]).toMatchObject({ tool: 'draft_notes', workerId: 'bundle-request-1', result: { text: 'Release 1.2.0\n\n- Faster resumes\n- Approval emails' } });
    const history = await runtime.store.history(runId);
    expect(history.at(-1)!.codeVersion).toBe(vars[CODE_VERSION_ENV]);
    expect(secrets.reads).toEqual([apiKeySecret]);
    expect(messages.requests).toHaveLength(1);
    // The next step's message is on the queue (the one handled is deleted by the event source, not here).
    expect(await queueDepth(resources.clients, resources.queueUrl)).toBe(2);

    const emf = child.stdout.split('\n').filter((l) => l.startsWith('{') && l.includes('"_aws"')).map((l) => JSON.parse(l) as Json);
    expect(emf).toHaveLength(1);
    expect(emf[0]!._aws.CloudWatchMetrics[0].Namespace).toBe(METRICS_NAMESPACE);
    expect(emf[0]).toMatchObject({ agent: 'release-notes', service: 'stepwise-worker', deployment: 'release-notes-prod', [METRIC_NAMES.steps]: 1 });
    expect(emf[0]!._aws.CloudWatchMetrics[0].Dimensions).toEqual([expect.arrayContaining(['service', 'agent', 'deployment'])]);
    expect(emf[0]![METRIC_NAMES.inputTokens]).toBe(messages.requests[0]!.usage!.input_tokens);
  });
});
