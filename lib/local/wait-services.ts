import { dirname, join } from 'node:path';
import type { WaitServices } from '../waits/services.ts';
import { localSigningKey } from '../waits/signing-key.ts';
import { OutboxNotifier } from './outbox-notifier.ts';
import type { LocalRuntime } from './runtime.ts';

export const DEFAULT_PORT = 8787;

/**
 * Waits on one machine: approval emails land as .eml files in `<db dir>/outbox`, links are signed with the
 * key file beside the database and point at `stepwise serve` (STEPWISE_PUBLIC_URL, or localhost), and
 * events are kept in the same SQLite file.
 */
export function localWaitServices(runtime: LocalRuntime, dbPath: string, env: NodeJS.ProcessEnv = process.env): WaitServices & { outboxDir: string } {
  const dir = dirname(dbPath);
  const outboxDir = env.STEPWISE_OUTBOX ?? join(dir, 'outbox');
  return {
    notifier: new OutboxNotifier(outboxDir),
    signingKey: localSigningKey(join(dir, 'signing.key')),
    publicUrl: env.STEPWISE_PUBLIC_URL ?? `http://127.0.0.1:${DEFAULT_PORT}`,
    events: runtime.events,
    outboxDir,
  };
}
