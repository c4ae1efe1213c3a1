import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';

/**
 * A program passing an unset variable as the file (`openLocalRuntime({ dbPath: process.env.DB ?? '' })`):
 * SQLite opens "" as a private temporary database, deleted on close, so every run started in it was lost
 * when the program ended. The CLI reads an empty STEPWISE_DB as the default file; the library refuses it.
 */
describe('the local runtime given an empty path', () => {
  it('refuses "", saying why, where SQLite opened a temporary database', () => {
    const dbPath = '';
    expect(() => openLocalRuntime({ dbPath })).toThrow(InvalidInputError);
    expect(() => openLocalRuntime({ dbPath })).toThrow("the database path is empty (an unset variable?): SQLite would open a temporary database, deleted on close, and every run in it would be lost; give a file's path, or ':memory:' for one in memory");
  });

  it('still opens a database in memory when asked for one', () => {
    const runtime = openLocalRuntime({ dbPath: ':memory:' });
    expect(runtime.queue.depth()).toBe(0);
    runtime.close();
  });
});
