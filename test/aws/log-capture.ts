import { pino } from 'pino';
import type { Logger } from '../../lib/log.ts';

/** A pino logger whose JSON lines are kept for assertions. */
export function captureLogs(): { log: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: 'debug' }, { write: (line: string) => { lines.push(JSON.parse(line) as Record<string, unknown>); } });
  return { log, lines };
}
