import { join } from 'node:path';
import { OUTBOX_ENV } from '../settings.ts';
import type { WaitServices } from '../waits/services.ts';
import { localSigningKey } from '../waits/signing-key.ts';
import { OutboxNotifier } from '../waits/outbox-notifier.ts';
import { publicUrlOf } from '../waits/public-url.ts';
import { databaseDir } from './paths.ts';
import type { LocalRuntime } from './runtime.ts';

export const DEFAULT_PORT = 8787;

/**
 * Waits on one machine: approval emails land as .eml files in `<db dir>/outbox` (or STEPWISE_OUTBOX),
 * links are signed with the key file beside the database (the file itself, symlinks followed: databaseDir)
 * and point at `stepwise serve` (STEPWISE_PUBLIC_URL, or localhost), and events are kept in the same SQLite file.
 */
export function localWaitServices(runtime: LocalRuntime, dbPath: string, env: NodeJS.ProcessEnv = process.env): WaitServices {
  const dir = databaseDir(dbPath);
  return {
    notifier: new OutboxNotifier(env[OUTBOX_ENV]?.trim() || join(dir, 'outbox')),
    signingKey: localSigningKey(join(dir, 'signing.key')),
    publicUrl: publicUrlOf(env) ?? `http://127.0.0.1:${DEFAULT_PORT}`,
    events: runtime.events,
  };
}
