import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { localApiToken } from '../../lib/cli/commands/serve.ts';

let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

describe('the local API token', () => {
  it('is made once, readable by its owner only, and read back the same', () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-token-'));
    const path = join(dir, 'api-token');
    const token = localApiToken(path);
    expect(token).toMatch(/^[\w-]{32}$/);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(localApiToken(path)).toBe(token);
    expect(readFileSync(path, 'utf8')).toBe(token);
  });

  it('refuses an empty file, which would serve the API and the inspector without a token', () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-token-'));
    const path = join(dir, 'api-token');
    for (const empty of ['', '\n', '  \n']) {
      writeFileSync(path, empty);
      expect(() => localApiToken(path)).toThrow(/api-token is empty: delete it/);
    }
  });
});
