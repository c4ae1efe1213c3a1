import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { createLogger } from '../../lib/log.ts';
import type { AwsRuntime } from '../../lib/aws/runtime.ts';
import { SesNotifier } from '../../lib/aws/ses-notifier.ts';
import type { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { SIGNING_KEY_REFRESH_MS, awsWaitServices, secretSigningKey } from '../../lib/aws/wait-services.ts';
import { approvalEmail } from '../../lib/waits/approval-email.ts';
import { OutboxNotifier, readOutbox } from '../../lib/waits/outbox-notifier.ts';
import { signApproval, verifyApproval } from '../../lib/waits/approval-token.ts';
import { waitRecordFor } from '../../lib/core/waits.ts';
import { stateAfter } from '../support/states.ts';
import { tempDb } from '../support/harness.ts';
import { keysOf } from '../../lib/waits/signing-key.ts';

/**
 * Which email and key each AWS setting gives: SES and the secret on AWS; an outbox folder and a key file
 * on a host of one's own (`npm run local-aws`); one of each pair, never both. Only the settings are
 * read here: nothing is sent, so the runtime is the part the event buffer keeps, unused.
 */
const runtime = { clients: { doc: {} }, tableName: 't', blobs: {} } as unknown as AwsRuntime;
const dir = tempDb();
afterAll(() => dir.cleanup());
const root = join(dir.path, '..');

function keyFile(name: string, text: string): string {
  const path = join(root, name);
  writeFileSync(path, text);
  return path;
}

/**
 * A Secrets Manager client over one secret: `current` answers reads of AWSCURRENT (a string, or an Error
 * thrown); `rotate(value)` labels `value` AWSPREVIOUS, as put-secret-value does with the value it replaces.
 * Before any rotation there is no AWSPREVIOUS version.
 */
function secretsClient(current: () => string | Error) {
  let previous: string | Error | undefined;
  const client = {
    send: async (command: { input: { VersionStage?: string } }) => {
      const value = command.input.VersionStage === 'AWSPREVIOUS' ? previous : current();
      if (value === undefined) throw Object.assign(new Error("Secrets Manager can't find the specified secret value for staging label: AWSPREVIOUS"), { name: 'ResourceNotFoundException' });
      if (value instanceof Error) throw value;
      return { SecretString: value };
    },
  } as unknown as SecretsManagerClient;
  return { client, rotate: (value: string | Error) => { previous = value; } };
}

describe('awsWaitServices', () => {
  it('takes the key from STEPWISE_SIGNING_KEY_FILE: links it signs verify with that file and no other', async () => {
    const key = Buffer.alloc(32, 7);
    const services = awsWaitServices(runtime, { STEPWISE_SIGNING_KEY_FILE: keyFile('good.key', `${key.toString('base64')}\n`) });
    const read = keysOf(await services.signingKey!()).signing;
    expect(read.equals(key)).toBe(true);
    const token = signApproval({ runId: 'r', waitId: 'w', approver: 'ops@example.com', expiresAt: 2_000 }, read);
    expect(verifyApproval(token, key, 1_000).ok).toBe(true);
    expect(verifyApproval(token, Buffer.alloc(32, 8), 1_000).ok).toBe(false);
  });

  it('warns of a key file other users can read or change, and takes it all the same; an owner-only file says nothing', async () => {
    const key = Buffer.alloc(32, 9).toString('base64');
    const lines: string[] = [];
    const log = createLogger({}, { format: 'json', env: {}, write: (line) => { lines.push(line); } });
    const warned = () => lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.event === 'signing-key-exposed');
    for (const [mode, word] of [[0o644, 'read'], [0o604, 'read'], [0o620, 'change'], [0o666, 'change']] as const) {
      lines.length = 0;
      const path = keyFile(`exposed-${mode.toString(8)}.key`, key);
      chmodSync(path, mode);
      // Taken: a Kubernetes secret volume is 0644 unless told otherwise, and a refusal would stop its workers.
      expect(keysOf(await awsWaitServices(runtime, { STEPWISE_SIGNING_KEY_FILE: path }, { log }).signingKey!()).signing.toString('base64')).toBe(key);
      expect(warned(), mode.toString(8)).toEqual([expect.objectContaining({ level: 'warn', path, mode: `0${mode.toString(8)}` })]);
      expect(warned()[0]!.msg).toBe(`the approval signing key file ${path} (STEPWISE_SIGNING_KEY_FILE) has mode 0${mode.toString(8)}: other users of this host can ${word} it, and whoever reads it can forge approval links; chmod 600 ${path} (a Kubernetes secret volume: defaultMode 0400)`);
    }
    for (const mode of [0o600, 0o400, 0o640]) {
      lines.length = 0;
      const path = keyFile(`owner-${mode.toString(8)}.key`, key);
      chmodSync(path, mode);
      awsWaitServices(runtime, { STEPWISE_SIGNING_KEY_FILE: path }, { log });
      expect(warned(), mode.toString(8)).toEqual([]);
    }
  });

  it('refuses a key file that is missing (never making one) or too short, naming the setting', () => {
    const missing = join(root, 'nope', 'signing.key');
    expect(() => awsWaitServices(runtime, { STEPWISE_SIGNING_KEY_FILE: missing })).toThrow(InvalidInputError);
    expect(() => awsWaitServices(runtime, { STEPWISE_SIGNING_KEY_FILE: missing })).toThrow(
      `the approval signing key file ${missing} (STEPWISE_SIGNING_KEY_FILE) does not exist: make it once with \`head -c 32 /dev/urandom | base64 > ${missing}\``);
    const short = keyFile('short.key', Buffer.alloc(16, 1).toString('base64'));
    expect(() => awsWaitServices(runtime, { STEPWISE_SIGNING_KEY_FILE: short })).toThrow(`the approval signing key in ${short} must be at least 32 bytes of base64`);
    mkdirSync(join(root, 'a-dir'), { recursive: true });
    expect(() => awsWaitServices(runtime, { STEPWISE_SIGNING_KEY_FILE: join(root, 'a-dir') })).toThrow(/cannot read the approval signing key file .*a-dir \(STEPWISE_SIGNING_KEY_FILE\): EISDIR/);
  });

  it('takes STEPWISE_PUBLIC_URL as an http(s) address, refusing one with no scheme as the local backend does', () => {
    expect(awsWaitServices(runtime, { STEPWISE_PUBLIC_URL: ' https://abc.execute-api.eu-west-1.amazonaws.com/ ' }).publicUrl).toBe('https://abc.execute-api.eu-west-1.amazonaws.com/');
    expect(awsWaitServices(runtime, { STEPWISE_PUBLIC_URL: '' }).publicUrl).toBeUndefined();
    for (const bad of ['abc.execute-api.eu-west-1.amazonaws.com', 'ftp://host/x']) {
      expect(() => awsWaitServices(runtime, { STEPWISE_PUBLIC_URL: bad })).toThrow(`STEPWISE_PUBLIC_URL must be the http:// or https:// address approval links point at (stepwise serve's, http://127.0.0.1:8787 by default; on AWS the API's URL), got ${JSON.stringify(bad)}`);
    }
  });

  it('refuses a secret and a file together, and SES and an outbox together', () => {
    const file = keyFile('both.key', Buffer.alloc(32, 2).toString('base64'));
    expect(() => awsWaitServices(runtime, { STEPWISE_SIGNING_KEY_SECRET_ID: 'stepwise/signing', STEPWISE_SIGNING_KEY_FILE: file }))
      .toThrow('set one of STEPWISE_SIGNING_KEY_SECRET_ID and STEPWISE_SIGNING_KEY_FILE, not both');
    expect(() => awsWaitServices(runtime, { STEPWISE_EMAIL_FROM: 'ops@example.com', STEPWISE_OUTBOX: root }, { outbox: (dir) => new OutboxNotifier(dir) }))
      .toThrow('set one of STEPWISE_EMAIL_FROM (send with SES) and STEPWISE_OUTBOX (write .eml files), not both');
  });

  it('writes the emails to STEPWISE_OUTBOX, sends them with SES from STEPWISE_EMAIL_FROM, or has no notifier', async () => {
    const outbox = join(root, 'outbox');
    const services = awsWaitServices(runtime, { STEPWISE_OUTBOX: ` ${outbox} ` }, { outbox: (dir) => new OutboxNotifier(dir) });
    expect(services.notifier).toBeInstanceOf(OutboxNotifier);
    const wait = waitRecordFor({ kind: 'approval', approvers: ['ops@example.com'], request: 'drop it' }, { step: 3, tool: 'request_approval', input: {}, at: 1 }, 'wait-1', 1);
    await services.notifier!.send(approvalEmail({ state: stateAfter('run-1', 2), wait, approver: 'ops@example.com', link: 'http://127.0.0.1:8787/approvals/v1.a.b' }));
    expect(readOutbox(outbox)).toEqual([expect.objectContaining({ to: 'ops@example.com', link: 'http://127.0.0.1:8787/approvals/v1.a.b' })]);

    expect(awsWaitServices(runtime, { STEPWISE_EMAIL_FROM: 'ops@example.com' }).notifier).toBeInstanceOf(SesNotifier);
    const none = awsWaitServices(runtime, { STEPWISE_OUTBOX: '  ' });
    // A Lambda function (no outbox given) has no folder anyone reads: said, not a silent drop.
    expect(() => awsWaitServices(runtime, { STEPWISE_OUTBOX: outbox })).toThrow('STEPWISE_OUTBOX writes emails as files for a host of your own (the CLI\'s workers); in Lambda, set STEPWISE_EMAIL_FROM to send them with SES');
    expect(none.notifier).toBeUndefined();
    expect(none.signingKey).toBeUndefined();
  });

  it('takes a signing key put into the secret (a rotation) in every container within minutes, keeping the one that worked while the secret cannot be read', async () => {
    const old = Buffer.alloc(32, 1);
    const rotated = Buffer.alloc(48, 2);
    let secret: string | Error = old.toString('base64');
    let reads = 0;
    const { client, rotate } = secretsClient(() => {
      reads++;
      return secret;
    });
    let now = 0;
    // A warm container: one that read the key before the rotation.
    const warm = secretSigningKey('sk', client, { now: () => now });
    expect(keysOf(await warm()).signing.equals(old)).toBe(true);
    rotate(secret);
    secret = rotated.toString('base64');
    now += 60_000;
    expect(keysOf(await warm()).signing.equals(old)).toBe(true);
    expect(reads).toBe(1);
    // A link a new container signs after the rotation: the warm API checks it with the new key once it is read again.
    const fresh = keysOf(await secretSigningKey('sk', client, { now: () => now })()).signing;
    const link = signApproval({ runId: 'r', waitId: 'w', approver: 'ops@example.com', expiresAt: now + 3_600_000 }, fresh);
    expect(verifyApproval(link, keysOf(await warm()).accepted, now).ok).toBe(false);
    now += SIGNING_KEY_REFRESH_MS;
    // It kept the old key for as long as the container lived, and refused every link signed with the new one.
    expect(keysOf(await warm()).signing.equals(rotated)).toBe(true);
    expect(verifyApproval(link, keysOf(await warm()).accepted, now).ok).toBe(true);
    // Links signed before the rotation still work there: the value it replaced is the secret's AWSPREVIOUS.
    const before = signApproval({ runId: 'r', waitId: 'w', approver: 'ops@example.com', expiresAt: now + 3_600_000 }, old);
    expect(verifyApproval(before, keysOf(await warm()).accepted, now).ok).toBe(true);
    // A refresh that fails keeps the key that worked; a first read that fails is said, and tried again.
    secret = new Error('ThrottlingException');
    now += SIGNING_KEY_REFRESH_MS;
    expect(keysOf(await warm()).signing.equals(rotated)).toBe(true);
    // So does one that finds a value that is no key (a secret emptied by hand), where it is refused by name.
    secret = 'short';
    now += SIGNING_KEY_REFRESH_MS;
    expect(keysOf(await warm()).signing.equals(rotated)).toBe(true);
    await expect(secretSigningKey('sk', client, { now: () => now })()).rejects.toThrow('the approval signing key in secret sk must be at least 32 bytes of base64');
    secret = new Error('ThrottlingException');
    await expect(secretSigningKey('sk', client, { now: () => now })()).rejects.toThrow('cannot read the approval signing key from secret sk: ThrottlingException');
  });
  it('checks links with the secret\'s AWSPREVIOUS too, where there is one that is a key and it can be read; signs with AWSCURRENT only', async () => {
    const current = Buffer.alloc(32, 4);
    const { client, rotate } = secretsClient(() => current.toString('base64'));
    const sign = (key: Buffer) => signApproval({ runId: 'r', waitId: 'w', approver: 'ops@example.com', expiresAt: 10_000 }, key);
    const accepted = async () => keysOf(await secretSigningKey('sk', client)()).accepted;
    // Never rotated: no AWSPREVIOUS version, and links are checked with the current key alone.
    expect(await accepted()).toEqual([current]);
    // A placeholder the secret was made with, before its first key, signed nothing: not taken as a key.
    rotate('placeholder');
    expect(await accepted()).toEqual([current]);
    // The replaced key, unreadable for now (throttled): the current key still signs and checks.
    rotate(Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' }));
    expect(await accepted()).toEqual([current]);
    const replaced = Buffer.alloc(32, 8);
    rotate(replaced.toString('base64'));
    const keys = keysOf(await secretSigningKey('sk', client)());
    expect(keys.signing.equals(current)).toBe(true);
    expect(verifyApproval(sign(replaced), keys.accepted, 1_000).ok).toBe(true);
    expect(verifyApproval(sign(current), keys.accepted, 1_000).ok).toBe(true);
    expect(verifyApproval(sign(Buffer.alloc(32, 6)), keys.accepted, 1_000)).toMatchObject({ ok: false, reason: 'bad-signature' });
  });
});
