import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../support/aws-servers.ts';
import { ROOT } from '../support/cli.ts';
import { tempDb } from '../support/harness.ts';
import { runStepwise } from '../support/processes.ts';

const AGENT = join(ROOT, 'test/support/approval-agent.ts');
const db = tempDb();
afterAll(() => db.cleanup());

/** Everything `stepwise serve` says on stdout from start to stop, on a port of its own. */
async function serveSays(env: Record<string, string | undefined>): Promise<{ port: number; lines: string[] }> {
  const port = await freePort();
  const server = runStepwise(['serve', '--agent', AGENT, '--port', String(port)], {
    STEPWISE_DB: db.path, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '', STEPWISE_API_TOKEN: undefined, ...env,
  });
  try {
    await server.line(/^serving agent approval-e2e on /);
  } finally {
    await server.stop();
  }
  // Stopped by its SIGTERM handler, not killed by the signal: the handler is there before the line.
  expect(server.child.signalCode).toBeNull();
  return { port, lines: server.out().trim().split('\n') };
}

describe('stepwise serve on a port its approval links do not name', () => {
  it('says where the links point and the setting that moves them, when STEPWISE_PUBLIC_URL is not set', async () => {
    // The workers make the links, with the default http://127.0.0.1:8787: a serve elsewhere answers none of them.
    const { port, lines } = await serveSays({ STEPWISE_PUBLIC_URL: undefined });
    expect(lines[0]).toMatch(new RegExp(`^serving agent approval-e2e on http://127\\.0\\.0\\.1:${port} `));
    expect(lines[1]).toBe(`approval links point at http://127.0.0.1:8787 (STEPWISE_PUBLIC_URL is not set), not here: start the workers and \`stepwise run\` with STEPWISE_PUBLIC_URL=http://127.0.0.1:${port}, or serve on --port 8787`);
    expect(lines.slice(2)).toEqual(['stopping (SIGTERM): requests in hand get 5 s to finish; SIGTERM again stops at once', 'stopped']);
  });

  it('says nothing more when STEPWISE_PUBLIC_URL is set, which the links then follow', async () => {
    const { port, lines } = await serveSays({ STEPWISE_PUBLIC_URL: 'http://127.0.0.1:9' });
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(new RegExp(`^serving agent approval-e2e on http://127\\.0\\.0\\.1:${port} `));
    expect(lines.slice(1)).toEqual(['stopping (SIGTERM): requests in hand get 5 s to finish; SIGTERM again stops at once', 'stopped']);
  });
});
