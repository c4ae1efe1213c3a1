import { pino, type Logger } from 'pino';

export type { Logger };

/** Structured JSON logs on stderr, so stdout stays free for command output. */
export function createLogger(bindings: Record<string, unknown> = {}): Logger {
  return pino(
    {
      level: process.env.STEPWISE_LOG_LEVEL ?? 'info',
      base: bindings,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    pino.destination({ fd: 2, sync: true }),
  );
}

export const silentLogger: Logger = pino({ level: 'silent' });
