import { spawn, spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

const COMMAND = ['--import', 'tsx', 'bench/chaos/run.ts'];

/** The environment without the AWS servers the global setup started: the command starts its own. */
function ownServersEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of Object.keys(env)) if (name.startsWith('AWS_ENDPOINT_URL')) delete env[name];
  return env;
}

describe('npm run chaos, the command (bench/chaos/run.ts)', () => {
  it('exits 2 with the reason on bad arguments, before it starts anything', () => {
    const result = spawnSync(process.execPath, [...COMMAND, '--processes', 'many'], { encoding: 'utf8' });
    expect(result.status).toBe(2);
    expect(result.stderr).toContain('npm run chaos: --processes takes a whole number, not "many"');
    expect(result.stdout).toBe('');
  });

  it('runs AWS schedules and then AWS worker processes in one command, each on servers it started, and checks both', async () => {
    // The AWS schedules stop their servers before the worker processes start theirs: the environment
    // left pointing at the stopped ones failed the second kind with ECONNREFUSED.
    const child = spawn(process.execPath, [...COMMAND, '--seed', '5', '--schedules', '0', '--aws', '1', '--processes', '0', '--aws-processes', '1'], { env: ownServersEnv() });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => { out += chunk; });
    child.stderr.on('data', (chunk: Buffer) => { out += chunk; });
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(out).not.toContain('ECONNREFUSED');
    expect(code, out).toBe(0);
    expect(out).toContain('AWS runtime: Lambda handler on DynamoDB Local + fauxqs');
    expect(out).toMatch(/real worker processes on DynamoDB Local \+ fauxqs \(--backend aws\)[^\n]*\n\s+schedules\s+1\n/);
    expect(out.match(/effects applied twice\s+0 /g)).toHaveLength(2);
  });
});
