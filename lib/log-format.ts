import { InvalidInputError } from './core/errors.ts';

/**
 * `json`: one JSON object per line at info and above, for supervisors, collectors and tests.
 * `pretty`: for a person at a terminal, next to the command's own progress lines on stdout: warnings and
 * errors only (STEPWISE_LOG_LEVEL lowers it), one `level: message (key=value ...)` line each.
 * Apart from the logger (lib/log.ts), so a command that logs nothing never loads pino.
 */
export type LogFormat = 'json' | 'pretty';
const FORMATS: readonly LogFormat[] = ['json', 'pretty'];

/** The one place the format is decided: --log, else STEPWISE_LOG_FORMAT, else pretty only on a terminal. */
export function chooseLogFormat(flag: string | undefined, env: NodeJS.ProcessEnv = process.env, stderrIsTTY = Boolean(process.stderr.isTTY)): LogFormat {
  const asked = flag ?? env.STEPWISE_LOG_FORMAT?.trim();
  if (asked === undefined || asked === '') return stderrIsTTY ? 'pretty' : 'json';
  // Named as it was given: a value from the environment blamed on --log sent the user looking for a flag.
  if (!FORMATS.includes(asked as LogFormat)) throw new InvalidInputError(`${flag !== undefined ? '--log' : 'STEPWISE_LOG_FORMAT'} must be json or pretty, got ${JSON.stringify(asked)}`);
  return asked as LogFormat;
}

/** pino's level names (pino.levels.values), and silent; kept here so a command checks them without pino. */
const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;

/**
 * STEPWISE_LOG_LEVEL, if set. A name pino does not know failed the command that logs (and every worker
 * Lambda invocation) with pino's own words, which named neither the setting nor the names it takes. The
 * CLI checks it for every command, as it does --log: a command that logs nothing (status, show) took a
 * misspelt level that the next worker then refused.
 */
export function chooseLogLevel(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const asked = env.STEPWISE_LOG_LEVEL?.trim().toLowerCase();
  if (!asked) return undefined;
  if (!(LEVELS as readonly string[]).includes(asked)) throw new InvalidInputError(`STEPWISE_LOG_LEVEL must be one of ${LEVELS.join(', ')}, got ${JSON.stringify(env.STEPWISE_LOG_LEVEL)}`);
  return asked;
}

let processFormat: LogFormat = 'json';

/** Sets the format of loggers created from now on in this process (the CLI does, once, from its flags). */
export function setLogFormat(format: LogFormat): void {
  processFormat = format;
}

export function logFormat(): LogFormat {
  return processFormat;
}
