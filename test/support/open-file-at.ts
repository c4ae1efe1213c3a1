/**
 * A process that opens a SQLite file with today's code at a given moment, for tests of several processes
 * bringing one older file to this layout at once: waits (spinning, so every process leaves the mark within
 * the same millisecond) until `goAt`, opens, reads run r's history and prints its length.
 */
import { openLocalRuntime } from '../../lib/local/runtime.ts';

const [path, goAt] = process.argv.slice(2) as [string, string];
while (Date.now() < Number(goAt)) { /* spin to the mark */ }
const runtime = openLocalRuntime({ dbPath: path });
try {
  process.stdout.write(`${(await runtime.store.history('r')).length}\n`);
} finally {
  runtime.close();
}
