/**
 * What one more b-tree written costs a durable SQLite transaction (WAL, synchronous=FULL): 1 to 7 tables,
 * one 100-byte row inserted into each per transaction, each table one more WAL frame. The one-table case
 * is the baseline (the insert floor of bench/step-overhead.ts), measured in the same rounds. It explains
 * a step's cost beyond the floor: the engine step writes about 3 frames beyond the insert's one, the worker
 * path about 6 (the queue's table, dedup index and live index); bench/step-pages.ts counts them by b-tree.
 *
 *   node --import tsx bench/frame-cost.ts [transactions-per-round] [rounds]
 */
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { benchCounts } from './args-support.ts';
import { fmt, median, tempDir } from './support.ts';

const [COUNT, ROUNDS] = benchCounts([{ name: 'transactions-per-round', fallback: 300 }, { name: 'rounds', fallback: 9 }]) as [number, number];
const TABLES = [1, 2, 3, 4, 5, 7];

const { dir, cleanup } = tempDir();
try {
  const cases = TABLES.map((tables) => {
    const db = new Database(join(dir, `tables-${tables}.db`));
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    for (let t = 0; t < tables; t++) db.exec(`CREATE TABLE t${t} (id INTEGER PRIMARY KEY, payload TEXT NOT NULL)`);
    const inserts = Array.from({ length: tables }, (_, t) => db.prepare(`INSERT INTO t${t} (payload) VALUES (?)`));
    const write = db.transaction(() => { for (const insert of inserts) insert.run('x'.repeat(100)); });
    return { tables, db, write, ms: [] as number[] };
  });
  // Interleaved round by round, so machine drift hits every case alike; round 0 warms up.
  for (let round = 0; round <= ROUNDS; round++) {
    for (const c of cases) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < COUNT; i++) c.write();
      if (round > 0) c.ms.push(Number(process.hrtime.bigint() - t0) / 1e6 / COUNT);
    }
  }
  const base = median(cases[0]!.ms);
  console.log(`durable transactions, ${COUNT} x ${ROUNDS} rounds (median of rounds), WAL + synchronous=FULL, one row per table`);
  console.log('tables'.padEnd(8), 'ms/tx'.padStart(8), 'x one table'.padStart(12), 'µs per table past the first'.padStart(28));
  for (const c of cases) {
    const ms = median(c.ms);
    const per = c.tables > 1 ? fmt(((ms - base) * 1000) / (c.tables - 1)) : '';
    console.log(String(c.tables).padEnd(8), fmt(ms, 3).padStart(8), fmt(ms / base, 2).padStart(12), per.padStart(28));
  }
  for (const c of cases) c.db.close();
} finally {
  cleanup();
}
