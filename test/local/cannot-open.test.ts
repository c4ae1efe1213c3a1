import { existsSync, mkdirSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { MAX_SQLITE_PATH_BYTES } from '../../lib/local/database.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import { removeTempDir, tempDir } from '../support/temp-dirs.ts';

const root = realpathSync(tempDir('stepwise-cannot-open-'));
afterAll(() => removeTempDir(root));

/**
 * SQLite's "unable to open database file" alone named neither the cause nor the fix: users checked the
 * permissions of a path that was only too long.
 */
describe('a path SQLite cannot open', () => {
  it('says when the full path is past the 504 bytes SQLite opens, as under a deep working directory', () => {
    let dir = root;
    while (dir.length < MAX_SQLITE_PATH_BYTES - 80) dir = join(dir, 'd'.repeat(60));
    const fits = join(dir, 'x'.repeat(MAX_SQLITE_PATH_BYTES - dir.length - 4) + '.db');
    expect(Buffer.byteLength(fits)).toBe(MAX_SQLITE_PATH_BYTES);
    openLocalRuntime({ dbPath: fits }).close();
    const longer = join(dir, `x${'x'.repeat(MAX_SQLITE_PATH_BYTES - dir.length - 4)}.db`);
    expect(() => openLocalRuntime({ dbPath: longer })).toThrow(InvalidInputError);
    expect(() => openLocalRuntime({ dbPath: longer })).toThrow(`unable to open database file: its full path, ${MAX_SQLITE_PATH_BYTES + 1} bytes, is longer than the ${MAX_SQLITE_PATH_BYTES} SQLite can open: pick a shorter --db`);
    expect(existsSync(longer)).toBe(false);
  });

  it('says when the path is a directory', () => {
    const dir = join(root, 'a-dir');
    mkdirSync(dir);
    expect(() => openLocalRuntime({ dbPath: dir })).toThrow(`cannot open the database ${dir}: unable to open database file: it is a directory: give the path of a file in it`);
  });
});
