import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LOG_TEXT_MAX, chooseLogFormat, createLogger } from '../../lib/log.ts';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';

function capture(format: 'json' | 'pretty', env: Record<string, string> = {}) {
  const lines: string[] = [];
  const log = createLogger({}, { format, env, write: (line) => { lines.push(line); } });
  return { log, lines };
}

describe('log format', () => {
  it('is pretty in a terminal and JSON otherwise, unless --log or STEPWISE_LOG_FORMAT says', () => {
    expect(chooseLogFormat(undefined, {}, true)).toBe('pretty');
    expect(chooseLogFormat(undefined, {}, false)).toBe('json');
    expect(chooseLogFormat('json', {}, true)).toBe('json');
    expect(chooseLogFormat('pretty', {}, false)).toBe('pretty');
    expect(chooseLogFormat(undefined, { STEPWISE_LOG_FORMAT: 'json' }, true)).toBe('json');
    expect(chooseLogFormat('pretty', { STEPWISE_LOG_FORMAT: 'json' }, false)).toBe('pretty');
    expect(() => chooseLogFormat('yaml', {}, false)).toThrow(/--log must be json or pretty, got "yaml"/);
    // A wrong value from the environment is named as the setting it came from, not as the flag.
    expect(() => chooseLogFormat(undefined, { STEPWISE_LOG_FORMAT: 'text' }, false)).toThrow('STEPWISE_LOG_FORMAT must be json or pretty, got "text"');
    expect(() => chooseLogFormat('yaml', { STEPWISE_LOG_FORMAT: 'json' }, false)).toThrow('--log must be json or pretty, got "yaml"');
  });

  it('writes JSON lines at info by default, the checkpoint line with run id, step, worker id and size', () => {
    const { log, lines } = capture('json');
    log.debug('not shown');
    log.info({ event: 'checkpoint', runId: 'r1', step: 3, version: 4, workerId: 'w1', bytes: 911 }, 'checkpoint written');
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({ level: 'info', event: 'checkpoint', runId: 'r1', step: 3, workerId: 'w1', bytes: 911, msg: 'checkpoint written' });
  });

  it('shows only warnings and errors in the pretty form, as one readable line each', () => {
    const { log, lines } = capture('pretty');
    log.info({ event: 'checkpoint', runId: 'r1' }, 'checkpoint written');
    log.warn({ event: 'stale-write', runId: 'r1', version: 3, note: 'two words' }, 'stale write rejected');
    log.error({ event: 'wrong-agent', detail: { a: 1 } }, 'run of another agent');
    expect(lines).toEqual([
      'warn: stale write rejected (event=stale-write runId=r1 version=3 note="two words")\n',
      'error: run of another agent (event=wrong-agent detail={"a":1})\n',
    ]);
  });

  it('writes a message\'s line breaks (a run\'s reason from a zod error) as \\n in the pretty form: one record, one line', () => {
    const { log, lines } = capture('pretty');
    log.warn({ event: 'checkpoint', runId: 'r1' }, 'run r1 failed: [\n  {\r\n    "code": "too_small"\u2028  }\n]');
    expect(lines).toEqual(['warn: run r1 failed: [\\n  {\\n    "code": "too_small"\\n  }\\n] (event=checkpoint runId=r1)\n']);
  });

  it('shows control characters in the pretty form as escapes, not sent to the terminal', () => {
    const { log, lines } = capture('pretty');
    log.warn({ event: 'step-failed', runId: 'r\u001b]0;pwned\u0007', error: '\u001b[31mred' }, 'failed: \u009b2J');
    expect(lines).toEqual(['warn: failed: \\u009b2J (event=step-failed runId=r\\u001b]0;pwned\\u0007 error=\\u001b[31mred)\n']);
  });

  it('keeps the info lines available in the pretty form with STEPWISE_LOG_LEVEL=info', () => {
    const { log, lines } = capture('pretty', { STEPWISE_LOG_LEVEL: 'info' });
    log.info({ event: 'checkpoint', runId: 'r1', step: 1, workerId: 'w1', bytes: 900 }, 'checkpoint written');
    expect(lines).toEqual(['info: checkpoint written (event=checkpoint runId=r1 step=1 workerId=w1 bytes=900)\n']);
  });

  it('takes STEPWISE_LOG_LEVEL in any case, and refuses a level it does not know by the setting\'s name', () => {
    const { log, lines } = capture('json', { STEPWISE_LOG_LEVEL: ' Debug ' });
    log.debug('shown');
    expect(lines).toHaveLength(1);
    expect(() => capture('json', { STEPWISE_LOG_LEVEL: 'verbose' })).toThrow('STEPWISE_LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent, got "verbose"');
  });

  it('any command run with an unknown STEPWISE_LOG_LEVEL exits 2 with that one line, also one that logs nothing', async () => {
    const db = tempDb();
    try {
      const started = await stepwiseCli(['start', '--agent', join(ROOT, 'test/support/process-agent.ts'), '--goal', 'write 1 row'], {
        STEPWISE_DB: db.path, STEPWISE_LOG_LEVEL: 'verbose', STEPWISE_LOG_FORMAT: undefined,
      });
      expect(started).toMatchObject({ code: 2, out: '' });
      expect(started.err).toBe('stepwise: STEPWISE_LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent, got "verbose"\n');
      // A command that logs nothing refuses it too, so the misspelling shows before a worker meets it.
      for (const args of [['status'], ['history', 'r1'], ['prune']]) {
        const read = await stepwiseCli(args, { STEPWISE_DB: db.path, STEPWISE_LOG_LEVEL: 'verbose', STEPWISE_LOG_FORMAT: undefined });
        expect(read, args[0]).toMatchObject({ code: 2, out: '', err: 'stepwise: STEPWISE_LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent, got "verbose"\n' });
      }
    } finally {
      db.cleanup();
    }
  });

  it('never carries credentials of a URL, in either form', () => {
    for (const format of ['json', 'pretty'] as const) {
      const { log, lines } = capture(format);
      log.warn({ model: 'Anthropic x (API at https://gw-user:s3cret@gateway.example/v1?api_key=k-123&team=blue)' }, 'at https://u:p4ss@host/x');
      expect(lines).toHaveLength(1);
      for (const secret of ['gw-user', 's3cret', 'k-123', 'p4ss']) expect(lines[0]).not.toContain(secret);
      expect(lines[0]).toContain('https://***@gateway.example/v1?api_key=***&team=blue');
    }
  });
});

describe('masking in a log line whose value spans lines', () => {
  it('masks only the secret: the line after a secret query value, and the line before a user:password@, stay', () => {
    for (const format of ['json', 'pretty'] as const) {
      const { log, lines } = capture(format);
      log.warn({ error: 'connect to https://db.example/x?token=abc failed\nretry 3 of 5: https://db.example/x?token=abc\nadmin:hunter2@db.example refused\ttry again' }, 'failed');
      const error = format === 'json' ? (JSON.parse(lines[0]!) as { error: string }).error : JSON.parse(/error=("[^\n]*")\)\n$/.exec(lines[0]!)![1]!) as string;
      expect(error, format).toBe('connect to https://db.example/x?token=*** failed\nretry 3 of 5: https://db.example/x?token=***\n***@db.example refused\ttry again');
    }
  });
});

describe('a log line carrying what user code threw', () => {
  // A startOn goal, an eventKey or an answer's handler that threw a 5 MB message made a 5 MB line, which
  // CloudWatch cuts at 256 KB and no collector then parses.
  it('cuts a long message and long fields to LOG_TEXT_MAX, saying how long they were, and keeps the rest', () => {
    const huge = 'x'.repeat(5_000_000);
    const { log, lines } = capture('json', { STEPWISE_LOG_LEVEL: 'info' });
    log.warn({ event: 'trigger-error', error: huge, eventId: 'e-1', nested: { kept: 'as is' } }, `the trigger threw: ${huge}`);
    log.info(huge);
    expect(lines).toHaveLength(2);
    const line = JSON.parse(lines[0]!) as Record<string, string | Record<string, string>>;
    expect(lines[0]!.length).toBeLessThan(3 * LOG_TEXT_MAX);
    expect(line.error).toBe(`${'x'.repeat(LOG_TEXT_MAX)}... (5000000 characters, cut)`);
    expect(line.msg).toMatch(/^the trigger threw: x+\.\.\. \(5000019 characters, cut\)$/);
    expect(line).toMatchObject({ event: 'trigger-error', eventId: 'e-1', nested: { kept: 'as is' } });
    expect(lines[1]!.length).toBeLessThan(2 * LOG_TEXT_MAX);
    // A line under the limit is as it was.
    const short = capture('json', { STEPWISE_LOG_LEVEL: 'info' });
    short.log.info({ event: 'checkpoint', reason: 'y'.repeat(LOG_TEXT_MAX) }, 'ok');
    expect((JSON.parse(short.lines[0]!) as { reason: string }).reason).toBe('y'.repeat(LOG_TEXT_MAX));
  });
});
