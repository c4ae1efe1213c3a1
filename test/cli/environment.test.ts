import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, stepwiseCli } from '../support/cli.ts';
import { tempDir } from '../support/temp-dirs.ts';

const AGENT = join(ROOT, 'test/support/js-agent.mjs');

describe('the environment variables the CLI reads', () => {
  it('an empty STEPWISE_DB (exported but unset) means the default file, where the run is found again', async () => {
    const cwd = tempDir('stepwise-env-');
    const env = { STEPWISE_DB: '', STEPWISE_LOG_LEVEL: 'warn' };
    const started = await stepwiseCli(['start', '--agent', AGENT, '--goal', 'echo', '--run-id', 'env-1'], env, cwd);
    expect(started.code).toBe(0);
    expect(existsSync(join(cwd, '.stepwise/stepwise.db'))).toBe(true);
    const status = await stepwiseCli(['status', 'env-1'], env, cwd);
    expect(status.err).toBe('');
    expect(status.code).toBe(0);
    expect(status.out).toContain('status   running');
  });

  it('a STEPWISE_DB or --db that starts with ~/ (no shell expanded it) is in the home directory, not in a folder named ~ here', async () => {
    const home = tempDir('stepwise-home-');
    const cwd = tempDir('stepwise-env-');
    const env = { HOME: home, STEPWISE_LOG_LEVEL: 'warn' };
    const started = await stepwiseCli(['start', '--agent', AGENT, '--goal', 'echo', '--run-id', 'home-1'], { ...env, STEPWISE_DB: '~/runs.db' }, cwd);
    expect(started.code, started.err).toBe(0);
    expect(existsSync(join(home, 'runs.db'))).toBe(true);
    expect(existsSync(join(cwd, '~'))).toBe(false);
    // From any other directory, by the flag as by the variable: the same file.
    const status = await stepwiseCli(['status', 'home-1', '--db=~/runs.db'], { ...env, STEPWISE_DB: undefined }, tempDir('stepwise-env-'));
    expect(status.err).toBe('');
    expect(status.out).toContain('status   running');
  });

  it('a wrong STEPWISE_BACKEND or STEPWISE_LOG_FORMAT is refused by its own name, not as the flag that was not given', async () => {
    const env = { STEPWISE_DB: join(tempDir('stepwise-env-'), 'runs.db'), STEPWISE_LOG_LEVEL: 'warn' };
    expect(await stepwiseCli(['status'], { ...env, STEPWISE_BACKEND: 'sqlite' })).toEqual({ code: 2, out: '', err: 'stepwise: STEPWISE_BACKEND must be local or aws, got "sqlite"\n' });
    expect(await stepwiseCli(['status', '--backend', 'sqlite'], env)).toEqual({ code: 2, out: '', err: 'stepwise: --backend must be local or aws, got "sqlite"\n' });
    expect(await stepwiseCli(['status'], { ...env, STEPWISE_LOG_FORMAT: 'text' })).toEqual({ code: 2, out: '', err: 'stepwise: STEPWISE_LOG_FORMAT must be json or pretty, got "text"\n' });
  });

  it('serve refuses a STEPWISE_API_TOKEN short enough to guess, before it opens anything', async () => {
    const env = { STEPWISE_DB: join(tempDir('stepwise-env-'), 'runs.db'), STEPWISE_LOG_LEVEL: 'warn' };
    expect(await stepwiseCli(['serve', '--agent', AGENT, '--port', '0'], { ...env, STEPWISE_API_TOKEN: 'secret' })).toEqual({
      code: 2, out: '',
      err: 'stepwise: STEPWISE_API_TOKEN is 6 characters; it is the API\'s and the inspector\'s only lock, so give at least 16 (head -c 24 /dev/urandom | base64), or leave it unset for the token serve keeps in a file\n',
    });
    expect(existsSync(env.STEPWISE_DB)).toBe(false);
  });

  it('approval links: an empty STEPWISE_PUBLIC_URL means the default address, one that is not an http(s) URL is refused', async () => {
    const dir = tempDir('stepwise-env-');
    const env = { STEPWISE_DB: join(dir, 'runs.db'), EFFECTS_DB: join(dir, 'effects.db'), STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '' };
    const approvalAgent = join(ROOT, 'test/support/approval-agent.ts');
    // Empty, it turned every approval email off ('no ... public URL is configured').
    const unset = await stepwiseCli(['run', '--agent', approvalAgent, '--goal', 'drop the old table', '--run-id', 'url-1'], { ...env, STEPWISE_PUBLIC_URL: '' });
    expect(unset.code).toBe(0);
    expect(unset.err).toBe('');
    expect(unset.out).toMatch(/^ {2}approve or reject: http:\/\/127\.0\.0\.1:8787\/approvals\/v1\.\S+$/m);
    // Without its scheme, it went in front of every emailed link: `localhost:8787/approvals/...`.
    const noScheme = await stepwiseCli(['run', '--agent', approvalAgent, '--goal', 'drop the old table', '--run-id', 'url-2'], { ...env, STEPWISE_PUBLIC_URL: 'localhost:8787' });
    expect(noScheme).toEqual({
      code: 2, out: '',
      err: `stepwise: STEPWISE_PUBLIC_URL must be the http:// or https:// address approval links point at (stepwise serve's, http://127.0.0.1:8787 by default; on AWS the API's URL), got "localhost:8787"\n`,
    });
    expect((await stepwiseCli(['status', 'url-2'], env)).code).toBe(2);
  });
});
