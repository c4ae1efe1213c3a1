import { mkdirSync, realpathSync, symlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { localWaitServices } from '../../lib/local/wait-services.ts';
import { OutboxNotifier } from '../../lib/waits/outbox-notifier.ts';
import { runStepwise } from '../support/processes.ts';
import { ROOT } from '../support/cli.ts';
import { removeTempDir, tempDir } from '../support/temp-dirs.ts';
import { keysOf } from '../../lib/waits/signing-key.ts';

const root = tempDir('stepwise-symlinked-');
afterAll(() => removeTempDir(root));

/** The file in one directory, and a symlink to it in another: two paths that name one database. */
function linkedFile(): { file: string; link: string } {
  const real = join(root, `real-${Math.random().toString(16).slice(2)}`);
  const linked = join(root, `linked-${Math.random().toString(16).slice(2)}`);
  mkdirSync(real);
  mkdirSync(linked);
  const file = join(real, 'stepwise.db');
  openLocalRuntime({ dbPath: file }).close();
  const link = join(linked, 'runs.db');
  symlinkSync(file, link);
  return { file, link };
}

describe('a database named through a symlink', () => {
  it('signs approval links with the key beside the file itself, the one a process given the file\'s own path checks them with', async () => {
    const { file, link } = linkedFile();
    const viaLink = openLocalRuntime({ dbPath: link });
    const viaFile = openLocalRuntime({ dbPath: file });
    try {
      const worker = localWaitServices(viaLink, link, {});
      const serve = localWaitServices(viaFile, file, {});
      // A key beside the link signed every link that serve, given the file, refused as "Invalid link".
      expect(keysOf(await worker.signingKey!()).signing.equals(keysOf(await serve.signingKey!()).signing)).toBe(true);
      expect((worker.notifier as OutboxNotifier).dir).toBe(join(dirname(realpathSync(file)), 'outbox'));
    } finally {
      viaLink.close();
      viaFile.close();
    }
  });

  it('serve keeps its API token beside the file itself too', async () => {
    const { file, link } = linkedFile();
    const server = runStepwise(['serve', '--agent', join(ROOT, 'test/support/approval-agent.ts'), '--port', '0', '--db', link], {
      STEPWISE_DB: undefined, STEPWISE_API_TOKEN: undefined, STEPWISE_OUTBOX: undefined, STEPWISE_LOG_LEVEL: 'warn', ANTHROPIC_API_KEY: '',
    });
    try {
      const line = await server.line(/^serving agent /);
      expect(line).toContain(`API token in ${join(dirname(realpathSync(file)), 'api-token')};`);
      expect(line).toContain(`approval emails in ${join(dirname(realpathSync(file)), 'outbox')})`);
    } finally {
      await server.stop();
    }
  }, 60_000);
});
