import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The emails in a local outbox folder: recipient, subject and the approval link of each. */
export function outboxEmails(dir: string): { to: string; subject: string; text: string; link: string }[] {
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith('.eml'));
  } catch {
    return [];
  }
  return files.map((file) => {
    const eml = readFileSync(join(dir, file), 'utf8');
    const header = (name: string) => new RegExp(`^${name}: (.*)$`, 'm').exec(eml)?.[1]?.trim() ?? '';
    const part = eml.split('Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n')[1]!.split('\r\n--')[0]!;
    const text = Buffer.from(part.replace(/\r\n/g, ''), 'base64').toString('utf8');
    const subject = header('Subject');
    const encoded = /^=\?utf-8\?B\?(.*)\?=$/.exec(subject);
    return {
      to: header('To'), subject: encoded ? Buffer.from(encoded[1]!, 'base64').toString('utf8') : subject, text,
      link: /Review and decide: (\S+)/.exec(text)?.[1] ?? '',
    };
  });
}
