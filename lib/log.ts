import { pino, type Logger } from 'pino';
import { chooseLogLevel, logFormat, type LogFormat } from './log-format.ts';
import { cutAt } from './core/cut.ts';
import { printable } from './core/printable.ts';
import { redactSecrets } from './core/redact.ts';

export type { Logger };
export { chooseLogFormat, setLogFormat, type LogFormat } from './log-format.ts';

export interface LoggerOptions {
  format?: LogFormat;
  env?: NodeJS.ProcessEnv;
  /** Where lines go (default: stderr, synchronously), so stdout stays free for command output. */
  write?: (line: string) => void;
}

/** Structured logs on stderr; every line is cleaned of URL credentials and secret-named query values. */
export function createLogger(bindings: Record<string, unknown> = {}, options: LoggerOptions = {}): Logger {
  const format = options.format ?? logFormat();
  const env = options.env ?? process.env;
  const write = options.write ?? stderrWriter();
  return pino(
    {
      level: chooseLogLevel(env) ?? (format === 'pretty' ? 'warn' : 'info'),
      base: bindings,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      hooks: { logMethod: cutLongText },
    },
    { write: format === 'pretty' ? (line: string) => write(redactSecrets(prettyLine(line))) : (line: string) => write(redactSecrets(line)) },
  );
}

/**
 * The longest text a line holds in its message or in any top-level field. Lines carry what user code threw
 * (a startOn goal's error, an eventKey's, a tool's) and message bodies: a 5 MB error made a 5 MB line,
 * which CloudWatch cuts at 256 KB and no collector then parses.
 */
export const LOG_TEXT_MAX = 8192;

function cutText(text: string): string {
  return text.length <= LOG_TEXT_MAX ? text : `${cutAt(text, LOG_TEXT_MAX)}... (${text.length} characters, cut)`;
}

/**
 * pino's logMethod hook: the line's object fields and message, each cut to LOG_TEXT_MAX. Every step logs
 * its checkpoint line through here, so it allocates nothing unless something is cut.
 */
function cutLongText(this: Logger, args: Parameters<Logger['info']>, method: (...args: unknown[]) => void): void {
  const all = args as unknown[];
  for (let i = 0; i < all.length; i++) {
    const arg = all[i];
    if (typeof arg === 'string') {
      if (arg.length > LOG_TEXT_MAX) all[i] = cutText(arg);
    } else if (i === 0 && arg && typeof arg === 'object' && !(arg instanceof Error)) {
      all[0] = cutFields(arg as Record<string, unknown>);
    }
  }
  method.apply(this, all);
}

/** The object itself when no field is too long, else a copy with those cut. */
function cutFields(fields: Record<string, unknown>): Record<string, unknown> {
  let cut: Record<string, unknown> | undefined;
  for (const key in fields) {
    const value = fields[key];
    if (typeof value === 'string' && value.length > LOG_TEXT_MAX) (cut ??= { ...fields })[key] = cutText(value);
  }
  return cut ?? fields;
}

/** Where pino keeps a logger's formatters (pino's lib/symbols.js): a child's own log formatter replaces its parent's. */
const FORMATTERS = Symbol.for('pino.formatters');

/**
 * A child logger whose lines all carry `fields`, each once. pino writes a child's bindings and then the
 * line's own fields, so a line that names a bound field itself (the engine's checkpoint line names its
 * workerId; a Lambda handler binds it for the lines that do not) carried it twice: a JSON object with a
 * duplicate key, which collectors that check keys refuse (Elasticsearch and OpenSearch do), and bytes
 * billed on every step. Here a line's field equal to a bound one is left out of the line; one that differs
 * is kept, as it was.
 */
export function withFields(log: Logger, fields: Record<string, unknown>): Logger {
  const parent = (log as unknown as Record<symbol, { log?: (object: Record<string, unknown>) => Record<string, unknown> } | undefined>)[FORMATTERS]?.log;
  const keys = Object.keys(fields);
  return log.child(fields, {
    formatters: {
      log: (object) => {
        const own = parent ? parent(object as Record<string, unknown>) : object as Record<string, unknown>;
        if (!keys.some((key) => key in own && own[key] === fields[key])) return own;
        const kept = { ...own };
        for (const key of keys) if (kept[key] === fields[key]) delete kept[key];
        return kept;
      },
    },
  });
}

function stderrWriter(): (line: string) => void {
  const destination = pino.destination({ fd: 2, sync: true });
  return (line) => { destination.write(line); };
}

const HIDDEN = new Set(['level', 'time', 'msg', 'pid', 'hostname']);

/** `level: message (key=value ...)` from one JSON log line. */
export function prettyLine(json: string): string {
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  const fields = Object.entries(entry)
    .filter(([key, value]) => !HIDDEN.has(key) && value !== undefined)
    .map(([key, value]) => `${key}=${fieldText(value)}`);
  // A message's line breaks (a run's reason: a zod error spans lines) written as \n, as a field's are in its
  // JSON: one record, one line, where a reason's later lines read as lines of no record.
  const msg = String(entry.msg ?? '').replace(/\r\n|[\r\n\u2028\u2029]/g, '\\n');
  // Run ids, goals and errors in a field come from models, programs and events: shown, not acted on.
  return `${printable(`${String(entry.level)}: ${msg}${fields.length ? ` (${fields.join(' ')})` : ''}`)}\n`;
}

function fieldText(value: unknown): string {
  // An error object (pino's err serializer) reads best as its message; the stack is in the JSON form.
  if (value && typeof value === 'object' && typeof (value as { message?: unknown }).message === 'string') value = (value as { message: string }).message;
  if (typeof value === 'string') return /^[^\s"=()]+$/.test(value) ? value : JSON.stringify(value);
  return JSON.stringify(value);
}

export const silentLogger: Logger = pino({ level: 'silent' });
