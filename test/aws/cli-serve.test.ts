import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../support/aws-servers.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { runStepwise } from '../support/processes.ts';
import { createTestResources, type TestResources } from './aws-fixtures.ts';

/**
 * `stepwise serve --backend aws` off AWS (a host of one's own, the local servers): the approval links'
 * key from a secret or a file, one of them, checked before the server listens; where the emails go, said
 * in its first line. Real DynamoDB Local and fauxqs behind it.
 */
const AGENT = join(ROOT, 'test/support/approval-agent.ts');
let aws: TestResources;
const dir = tempDb();
beforeAll(async () => { aws = await createTestResources('cli-serve'); });
afterAll(() => { aws?.close(); dir.cleanup(); });

function env(extra: Record<string, string>): Record<string, string> {
  return {
    STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', STEPWISE_STACK: '', STEPWISE_BACKEND: 'aws', STEPWISE_DB: dir.path,
    TABLE_NAME: aws.tableName, BUCKET_NAME: aws.bucketName, QUEUE_URL: aws.queueUrl,
    STEPWISE_SIGNING_KEY_SECRET_ID: '', STEPWISE_SIGNING_KEY_FILE: '', STEPWISE_EMAIL_FROM: '', STEPWISE_OUTBOX: '', STEPWISE_API_TOKEN: 'token-1234-5678-90ab',
    ...extra,
  };
}

describe('stepwise serve on the AWS backend', () => {
  it('with no signing key, or a key file that is not there, exits 2 before it listens, naming the settings', async () => {
    const none = await stepwiseCli(['serve', '--agent', AGENT, '--port', '0'], env({}));
    expect(none.code).toBe(2);
    expect(none.err).toBe('stepwise: no approval signing key is configured: on the AWS backend set STEPWISE_SIGNING_KEY_SECRET_ID (a Secrets Manager secret) or STEPWISE_SIGNING_KEY_FILE (a file)\n');
    expect(none.out).toBe('');
    const missing = join(dir.path, '..', 'no-such.key');
    const absent = await stepwiseCli(['serve', '--agent', AGENT, '--port', '0'], env({ STEPWISE_SIGNING_KEY_FILE: missing }));
    expect(absent.code).toBe(2);
    expect(absent.err).toContain(`stepwise: the approval signing key file ${missing} (STEPWISE_SIGNING_KEY_FILE) does not exist`);
    const both = await stepwiseCli(['serve', '--agent', AGENT, '--port', '0'], env({ STEPWISE_SIGNING_KEY_FILE: missing, STEPWISE_SIGNING_KEY_SECRET_ID: 'stepwise/key' }));
    expect(both.code).toBe(2);
    expect(both.err).toBe('stepwise: set one of STEPWISE_SIGNING_KEY_SECRET_ID and STEPWISE_SIGNING_KEY_FILE, not both\n');
  });

  it('with a key file: serves the API over DynamoDB, says that no approval email is sent, and operates no other agent\'s run', async () => {
    const keyFile = join(dir.path, '..', 'signing.key');
    writeFileSync(keyFile, Buffer.alloc(32, 5).toString('base64'));
    const port = await freePort();
    const server = runStepwise(['serve', '--agent', AGENT, '--port', String(port)], env({ STEPWISE_SIGNING_KEY_FILE: keyFile }));
    try {
      const line = await server.line(/^serving agent approval-e2e/);
      expect(line).toBe(`serving agent approval-e2e on http://127.0.0.1:${port} (API token in STEPWISE_API_TOKEN; approval emails not sent (neither STEPWISE_EMAIL_FROM nor STEPWISE_OUTBOX is set): answer with \`stepwise approve\`)`);
      const auth = { authorization: 'Bearer token-1234-5678-90ab', 'content-type': 'application/json' };
      const created = await fetch(`http://127.0.0.1:${port}/runs`, { method: 'POST', headers: auth, body: JSON.stringify({ goal: 'drop the old table', runId: 'serve-aws-1' }) });
      expect(created.status).toBe(201);
      expect((await aws.runtime().store.load('serve-aws-1'))?.version).toBe(1);
      const read = await fetch(`http://127.0.0.1:${port}/runs/serve-aws-1`, { headers: auth });
      expect(await read.json()).toMatchObject({ run: { runId: 'serve-aws-1', status: 'running', agent: 'approval-e2e' } });
      // Another agent's run in the same table: its next message belongs on its own queue, not this one.
      const other = await stepwiseCli(['start', '--agent', join(ROOT, 'test/support/process-agent.ts'), '--goal', 'write 1 row', '--run-id', 'serve-aws-other'], env({}));
      expect(other.code, other.err).toBe(0);
      const cancel = await fetch(`http://127.0.0.1:${port}/runs/serve-aws-other/cancel`, { method: 'POST', headers: auth, body: JSON.stringify({ by: 'ops' }) });
      expect({ status: cancel.status, body: await cancel.json() }).toEqual({
        status: 409, body: { error: 'run serve-aws-other belongs to agent "process-rows", not "approval-e2e": operate it through that agent\'s API, whose queue its workers read' },
      });
      expect((await aws.runtime().store.load('serve-aws-other'))?.status).toBe('running');
      // Nor is its id this API's to start a run under: a conflict, as another goal under the same id is.
      const taken = await fetch(`http://127.0.0.1:${port}/runs`, { method: 'POST', headers: auth, body: JSON.stringify({ goal: 'write 1 row', runId: 'serve-aws-other' }) });
      expect({ status: taken.status, body: await taken.json() }).toMatchObject({ status: 409, body: { runId: 'serve-aws-other', agent: 'process-rows' } });
      // The inspector this API serves refuses the same, where its forms cancelled and forked the run, the
      // fork's first message sent to this queue; its page shows the run without them, and says why.
      for (const action of ['cancel', 'retry', 'fork']) {
        const form = await fetch(`http://127.0.0.1:${port}/inspect/runs/serve-aws-other/${action}`, {
          method: 'POST', redirect: 'manual', headers: { authorization: 'Bearer token-1234-5678-90ab', 'content-type': 'application/x-www-form-urlencoded' }, body: 'fromStep=0',
        });
        expect(form.status, action).toBe(409);
        expect(await form.text(), action).toContain('run serve-aws-other belongs to agent &quot;process-rows&quot;, not &quot;approval-e2e&quot;: operate it through that agent&#39;s API, whose queue its workers read. Nothing was changed.');
      }
      const untouched = await aws.runtime().store.load('serve-aws-other');
      expect({ version: untouched?.version, cancelRequested: untouched?.cancelRequested }).toEqual({ version: 1, cancelRequested: undefined });
      expect((await aws.runtime().store.list({ limit: 100 })).map((r) => r.runId).sort()).toEqual(['serve-aws-1', 'serve-aws-other']);
      const page = await (await fetch(`http://127.0.0.1:${port}/inspect/runs/serve-aws-other`, { headers: auth })).text();
      expect(page).toContain('<p id="not-here">run serve-aws-other belongs to agent');
      expect(page).not.toContain('<form');
      expect(await (await fetch(`http://127.0.0.1:${port}/inspect/runs/serve-aws-1`, { headers: auth })).text()).toContain('id="cancel"');
    } finally {
      await server.stop();
    }
  });
});
