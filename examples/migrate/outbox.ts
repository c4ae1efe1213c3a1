import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The approval links in the .eml files of a local outbox folder. */
export function outboxLinks(dir: string): string[] {
  let files: string[] = [];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith('.eml'));
  } catch {
    return [];
  }
  return files.flatMap((file) => {
    const eml = readFileSync(join(dir, file), 'utf8');
    const text = eml.split('Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n')[1]?.split('\r\n--')[0] ?? '';
    const link = /Review and decide: (\S+)/.exec(Buffer.from(text.replace(/\r\n/g, ''), 'base64').toString('utf8'))?.[1];
    return link ? [link] : [];
  });
}
