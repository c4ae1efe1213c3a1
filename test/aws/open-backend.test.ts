import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createAwsClients } from '../../lib/aws/clients.ts';
import { ensureTable } from '../../lib/aws/provision.ts';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { useAwsServers } from '../support/aws-servers.ts';

/**
 * `openBackend` on AWS opens the runtime's SDK clients before it checks the wait settings and that the
 * resources exist; when either check throws, it closes them before the error leaves. Each runtime the CLI
 * opens here is counted when closed.
 */
const closes = vi.hoisted(() => ({ count: 0 }));
vi.mock('../../lib/aws/runtime.ts', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../lib/aws/runtime.ts')>();
  return {
    ...real,
    openAwsRuntime: (...args: Parameters<typeof real.openAwsRuntime>) => {
      const runtime = real.openAwsRuntime(...args);
      const close = runtime.close;
      return Object.assign(runtime, { close: () => { closes.count++; close(); } });
    },
  };
});
const { openBackend } = await import('../../lib/cli/backend.ts');

let stopServers: (() => Promise<void>) | undefined;
beforeAll(async () => { stopServers = await useAwsServers(); });
afterAll(async () => { await stopServers?.(); });
afterEach(() => {
  vi.unstubAllEnvs();
  closes.count = 0;
});

describe('openBackend on AWS: the runtime it opened is closed when it cannot go on', () => {
  it('both signing key settings: refused, and the runtime closed', async () => {
    vi.stubEnv('STEPWISE_SIGNING_KEY_SECRET_ID', 'stepwise/signing-key');
    vi.stubEnv('STEPWISE_SIGNING_KEY_FILE', '/tmp/stepwise-key');
    const error = await openBackend({ backend: 'aws', table: 'any' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidInputError);
    expect((error as Error).message).toBe('set one of STEPWISE_SIGNING_KEY_SECRET_ID and STEPWISE_SIGNING_KEY_FILE, not both');
    expect(closes.count).toBe(1);
  });

  it('a table that does not exist: refused with its name, and the runtime closed', async () => {
    const table = `stepwise-missing-${randomUUID().slice(0, 8)}`;
    const error = await openBackend({ backend: 'aws', table }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidInputError);
    expect((error as Error).message).toContain(table);
    expect(closes.count).toBe(1);
  });

  it('a table that exists: the backend is open, and closed only when its caller closes it', async () => {
    const table = `stepwise-open-${randomUUID().slice(0, 8)}`;
    const clients = createAwsClients();
    await ensureTable(clients.dynamo, table);
    const backend = await openBackend({ backend: 'aws', table });
    expect(backend.kind).toBe('aws');
    expect(await backend.store.load('no-such-run')).toBeUndefined();
    expect(closes.count).toBe(0);
    backend.close();
    expect(closes.count).toBe(1);
    clients.dynamo.destroy();
  });
});
