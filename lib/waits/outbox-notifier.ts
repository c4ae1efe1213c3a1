import { createHash, randomUUID } from 'node:crypto';
import { readFileSync, readdirSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { idempotencyKeyPrefix } from '../core/keys.ts';
import type { Notification, Notifier } from '../ports.ts';
import { makeDir } from '../make-dir.ts';

/**
 * Email as files, for a machine with no mail service (locally; on the AWS backend with STEPWISE_OUTBOX,
 * as `npm run local-aws` sets it): each notification becomes `<outbox>/<hash of id>.eml`, a real MIME
 * message any mail client opens. Written to a temporary name and renamed, so a reader never sees half a
 * message; the same id always maps to the same file, so sending twice leaves one email.
 */
export class OutboxNotifier implements Notifier {
  constructor(readonly dir: string, private readonly from = 'stepwise@localhost') {}

  async send(notification: Notification): Promise<void> {
    makeDir(this.dir);
    const file = this.pathOf(notification.id);
    const temp = join(this.dir, `.${randomUUID()}.tmp`);
    // Readable by its owner only: an approval email's link is the approver's credential.
    writeFileSync(temp, mime(notification, this.from), { mode: 0o600 });
    renameSync(temp, file);
  }

  /**
   * The run's emails by their X-Stepwise-Id, as their file names are hashes. Read and removed one at a
   * time: a file gone meanwhile (another delete) is passed over, and a delete cut short is finished by
   * running it again.
   */
  async deleteRun(runId: string): Promise<number> {
    const prefix = idempotencyKeyPrefix(runId);
    let deleted = 0;
    for (const name of emlFiles(this.dir)) {
      const file = join(this.dir, name);
      try {
        if (!headerOf(readFileSync(file, 'utf8'), 'X-Stepwise-Id').startsWith(prefix)) continue;
        unlinkSync(file);
        deleted++;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      }
    }
    return deleted;
  }

  pathOf(id: string): string {
    return join(this.dir, `${createHash('sha256').update(id).digest('hex').slice(0, 32)}.eml`);
  }
}

function mime(n: Notification, from: string): string {
  const boundary = `stepwise-${createHash('sha256').update(n.id).digest('hex').slice(0, 16)}`;
  return [
    `From: ${from}`,
    `To: ${n.to}`,
    `Subject: ${encodeHeader(n.subject)}`,
    `Message-ID: <${createHash('sha256').update(n.id).digest('hex')}@stepwise.local>`,
    `X-Stepwise-Id: ${encodeHeader(n.id)}`,
    'MIME-Version: 1.0',
    `Content-Type: multipart/alternative; boundary="${boundary}"`,
    '',
    `--${boundary}`,
    'Content-Type: text/plain; charset=utf-8',
    'Content-Transfer-Encoding: base64',
    '',
    wrap(Buffer.from(n.text).toString('base64')),
    `--${boundary}`,
    'Content-Type: text/html; charset=utf-8',
    'Content-Transfer-Encoding: base64',
    '',
    wrap(Buffer.from(n.html).toString('base64')),
    `--${boundary}--`,
    '',
  ].join('\r\n');
}

/** Non-ASCII or long headers as RFC 2047 encoded words, so a goal in any language survives. */
function encodeHeader(value: string): string {
  const flat = value.replace(/[\r\n]+/g, ' ');
  return /^[\x20-\x7e]*$/.test(flat) ? flat : `=?utf-8?B?${Buffer.from(flat).toString('base64')}?=`;
}

function wrap(base64: string): string {
  return base64.replace(/.{1,76}/g, (line) => `${line}\r\n`).trimEnd();
}

/** An email as the outbox holds it: for `stepwise serve`'s users, the demo and the tests. */
export interface OutboxEmail {
  file: string;
  to: string;
  subject: string;
  text: string;
  /** The approval link in the text, if any. */
  link?: string;
}

/** Reads the emails an OutboxNotifier wrote to `dir` (none if the folder does not exist yet). */
export function readOutbox(dir: string): OutboxEmail[] {
  return emlFiles(dir).map((name) => {
    const file = join(dir, name);
    const eml = readFileSync(file, 'utf8');
    const part = eml.split('Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n')[1]?.split('\r\n--')[0] ?? '';
    const text = Buffer.from(part.replace(/\r\n/g, ''), 'base64').toString('utf8');
    const link = /Review and decide: (\S+)/.exec(text)?.[1];
    return { file, to: headerOf(eml, 'To'), subject: headerOf(eml, 'Subject'), text, ...(link ? { link } : {}) };
  });
}

/** The .eml files in `dir`, by name (none if the folder does not exist yet). */
function emlFiles(dir: string): string[] {
  try {
    return readdirSync(dir).filter((f) => f.endsWith('.eml')).sort();
  } catch {
    return [];
  }
}

/** A header of the message, decoded as encodeHeader wrote it. */
function headerOf(eml: string, field: string): string {
  const value = new RegExp(`^${field}: (.*)$`, 'm').exec(eml)?.[1]?.trim() ?? '';
  const encoded = /^=\?utf-8\?B\?(.*)\?=$/.exec(value);
  return encoded ? Buffer.from(encoded[1]!, 'base64').toString('utf8') : value;
}
