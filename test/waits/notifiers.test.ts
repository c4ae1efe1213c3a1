import { SESv2Client } from '@aws-sdk/client-sesv2';
import { readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SesNotifier } from '../../lib/aws/ses-notifier.ts';
import { OutboxNotifier } from '../../lib/waits/outbox-notifier.ts';
import { approvalEmail } from '../../lib/waits/approval-email.ts';
import { keysOf, localSigningKey } from '../../lib/waits/signing-key.ts';
import { waitRecordFor } from '../../lib/core/waits.ts';
import { stateAfter } from '../support/states.ts';
import { startSesServer } from '../support/ses-server.ts';
import { tempDb } from '../support/harness.ts';

const NOW = 1_800_000_000_000;
const hostile = '<script>alert(1)</script> & "quotes"';
const state = { ...stateAfter('run-7', 2), goal: `migrate ${hostile}` };
const wait = waitRecordFor(
  { kind: 'approval', approvers: ['ops@example.com'], request: `drop ${hostile}` },
  { step: 3, tool: 'request_approval', input: { request: `drop ${hostile}` }, at: NOW },
  'wait-12345678', NOW,
);
const email = approvalEmail({ state, wait, approver: 'ops@example.com', link: 'http://127.0.0.1:9/approvals/v1.abc.def' });

describe('the approval email', () => {
  it('names the request, the run and the link; its HTML escapes every piece of run text', () => {
    expect(email.subject).toContain('Approval needed: drop');
    expect(email.text).toContain('http://127.0.0.1:9/approvals/v1.abc.def');
    expect(email.text).toContain(`Run: run-7`);
    expect(email.html).not.toContain('<script>');
    expect(email.html).toContain('&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quotes&quot;');
    expect(email.id).toBe('run-7/wait-wait-12345678/ops@example.com');
  });

  it("keeps the agent's request on one marked line: text that runs on cannot pass for the email's own link", () => {
    const forged = 'drop old_rows\n\nReview and decide: https://evil.example/approve\n';
    const asked = waitRecordFor({ kind: 'approval', approvers: ['ops@example.com'], request: forged }, { step: 3, tool: 'request_approval', input: {}, at: NOW }, 'wait-2', NOW);
    const lines = approvalEmail({ state: { ...state, goal: 'copy\nReview and decide: https://evil.example/goal' }, wait: asked, approver: 'ops@example.com', link: 'http://127.0.0.1:9/approvals/v1.x.y' }).text.split('\n');
    expect(lines.filter((l) => l.startsWith('Review and decide:'))).toEqual(['Review and decide: http://127.0.0.1:9/approvals/v1.x.y']);
    expect(lines).toContain("Request (the agent's words): drop old_rows Review and decide: https://evil.example/approve");
    expect(lines).toContain("Goal (the starter's words): copy Review and decide: https://evil.example/goal");
  });

  it("shows the tool call's arguments as they run: a line or paragraph separator, or a turn of the writing direction, as its escape", () => {
    // JSON escapes \n, not these: a mail reader breaks the line at U+2028, and U+202E draws "swor_dlo" as old_rows.
    const input = { table: '\u202eswor_dlo\u2028\u2029Review and decide: https://evil.example/approve' };
    const asked = waitRecordFor({ kind: 'approval', approvers: ['ops@example.com'], request: 'drop it' }, { step: 3, tool: 'drop_table', input, at: NOW }, 'wait-3', NOW);
    const { text, html } = approvalEmail({ state, wait: asked, approver: 'ops@example.com', link: 'http://127.0.0.1:9/approvals/v1.x.y' });
    const lines = text.split(/\r\n|[\n\r\u2028\u2029\u0085]/);
    expect(lines.filter((l) => l.startsWith('Review and decide:'))).toEqual(['Review and decide: http://127.0.0.1:9/approvals/v1.x.y']);
    expect(lines).toContain('Tool call: drop_table {"table":"\\u202eswor_dlo\\u2028\\u2029Review and decide: https://evil.example/approve"}');
    expect(html).not.toMatch(/[\u2028\u2029\u202e]/);
    // The same string to a parser.
    expect(JSON.parse(lines.find((l) => l.startsWith('Tool call: '))!.slice('Tool call: drop_table '.length))).toEqual(input);
  });
});

describe('the outbox notifier', () => {
  it('writes one readable .eml per notification id, however often it is sent', async () => {
    const dir = tempDb();
    try {
      const outbox = new OutboxNotifier(join(dir.path, '..', 'outbox'));
      await outbox.send(email);
      await outbox.send(email);
      const files = readdirSync(join(dir.path, '..', 'outbox'));
      expect(files).toHaveLength(1);
      const eml = readFileSync(outbox.pathOf(email.id), 'utf8');
      expect(eml).toMatch(/^From: stepwise@localhost\r\nTo: ops@example.com\r\nSubject: Approval needed/);
      const text = eml.split('Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n')[1]!.split('\r\n--')[0]!;
      expect(Buffer.from(text.replace(/\r\n/g, ''), 'base64').toString('utf8')).toContain('/approvals/v1.abc.def');
    } finally {
      dir.cleanup();
    }
  });
});

describe('the local signing key', () => {
  it('is created once, 32 bytes, readable only by its owner, and the same for every process', async () => {
    const dir = tempDb();
    try {
      const path = join(dir.path, '..', 'signing.key');
      const [a, b] = (await Promise.all([localSigningKey(path)(), localSigningKey(path)()])).map((k) => keysOf(k).signing) as [Buffer, Buffer];
      expect(a.length).toBe(32);
      expect(a.equals(b)).toBe(true);
      expect(keysOf(await localSigningKey(path)()).signing.equals(a)).toBe(true);
      expect(statSync(path).mode & 0o777).toBe(0o600);
    } finally {
      dir.cleanup();
    }
  });

  it('a local key file left empty or short says what to do: remove it, and a new one is made', async () => {
    const dir = tempDb();
    try {
      const path = join(dir.path, '..', 'signing.key');
      writeFileSync(path, '');
      // It blocked every process on the file with only "must be at least 32 bytes of base64".
      await expect(localSigningKey(path)()).rejects.toThrow(`the approval signing key in ${path} must be at least 32 bytes of base64: remove it, with every process on the database stopped, and a new key is made`);
      rmSync(path);
      expect(keysOf(await localSigningKey(path)()).signing.length).toBe(32);
    } finally {
      dir.cleanup();
    }
  });
});

describe('the SES notifier', () => {
  let ses: Awaited<ReturnType<typeof startSesServer>>;
  beforeAll(async () => { ses = await startSesServer(); });
  afterAll(async () => { await ses.stop(); });

  it('sends the email through SES v2 from the configured sender, retrying a 500', async () => {
    const client = new SESv2Client({ endpoint: ses.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'x', secretAccessKey: 'y' } });
    const notifier = new SesNotifier({ ses: client, from: 'approvals@example.com' });
    ses.failNext(1);
    await notifier.send(email);
    expect(ses.sent).toHaveLength(1);
    expect(ses.sent[0]).toMatchObject({ from: 'approvals@example.com', to: ['ops@example.com'], subject: email.subject, text: email.text, html: email.html });
    client.destroy();
  });
});
