/**
 * The pages a step writes, by b-tree: WAL frames per step of the engine step and of the worker path (500 B
 * and 2 B tool outputs), next to the floor's one insert, and to one row appended per transaction to a rowid
 * table and to a WITHOUT ROWID table keyed like the checkpoints, for one run and for eight (the split cost of each). Counted from the
 * WAL itself (automatic checkpoints off, so every frame written stays in it) and mapped to b-trees with
 * SQLite's dbstat table. Frames, not time: bench/frame-cost.ts prices a frame.
 *
 *   node --import tsx bench/step-pages.ts [steps]
 */
import Database from 'better-sqlite3';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { advance } from '../lib/engine/advance.ts';
import { startRun } from '../lib/engine/start.ts';
import { benchDeps, durable, fmt, instantModel, noopAgent, openBenchRuntime, tempDir, workerPathMsPerStep } from './support.ts';

const STEPS = Number(process.argv[2] ?? 300);

/** Frames in a WAL file, by the page each one holds. */
function framesByPage(walPath: string): Map<number, number> {
  const wal = readFileSync(walPath);
  const pageSize = wal.readUInt32BE(8);
  const frames = new Map<number, number>();
  for (let at = 32; at + 24 + pageSize <= wal.length; at += 24 + pageSize) {
    const page = wal.readUInt32BE(at);
    frames.set(page, (frames.get(page) ?? 0) + 1);
  }
  return frames;
}

/** Frames per step by b-tree name: the pages in the WAL, named from the database's own dbstat. */
function framesByTree(db: Database.Database, dbPath: string, steps: number): Map<string, number> {
  const names = new Map((db.prepare('SELECT pageno, name FROM dbstat').all() as { pageno: number; name: string }[]).map((r) => [r.pageno, r.name]));
  const trees = new Map<string, number>();
  for (const [page, count] of framesByPage(`${dbPath}-wal`)) {
    // Page 1 holds the file's header, rewritten whenever the file grows by a page.
    const name = page === 1 ? 'file header (page 1)' : names.get(page) ?? 'free pages';
    trees.set(name, (trees.get(name) ?? 0) + count / steps);
  }
  return trees;
}

/** Starts with an empty WAL that no checkpoint will empty again: what `write` adds is all there. */
function emptiedWal(db: Database.Database): void {
  db.pragma('wal_autocheckpoint = 0');
  db.pragma('wal_checkpoint(TRUNCATE)');
}

/** The checkpoints b-tree's pages by kind: their count, cells and payload bytes (dbstat). */
function checkpointsShape(db: Database.Database): string {
  const rows = db.prepare("SELECT pagetype, count(*) AS pages, sum(ncell) AS cells, sum(payload) AS payload FROM dbstat WHERE name = 'checkpoints' GROUP BY pagetype ORDER BY pagetype DESC")
    .all() as { pagetype: string; pages: number; cells: number; payload: number }[];
  return rows.map((r) => `${r.pages} ${r.pagetype} pages holding ${r.cells} cells of ${Math.round(r.payload / Math.max(1, r.cells))} B`).join(', ');
}
const shapes = new Map<string, string>();

async function stepCase(dir: string, path: 'engine' | 'worker', outputBytes: number): Promise<Map<string, number>> {
  const name = `${path}-${outputBytes}`;
  const runtime = openBenchRuntime(dir, name);
  const deps = benchDeps(runtime, noopAgent({ sideEffect: false, outputBytes }), instantModel('noop'));
  await startRun(deps, { goal: 'bench', runId: 'r' });
  emptiedWal(runtime.db);
  if (path === 'engine') for (let i = 0; i < STEPS; i++) await advance(deps, 'r');
  else await workerPathMsPerStep(deps, runtime, STEPS);
  const trees = framesByTree(runtime.db, join(dir, `${name}.db`), STEPS);
  shapes.set(name, checkpointsShape(runtime.db));
  runtime.close();
  return trees;
}

/** One row per transaction into a table of its own: the floor's insert, or a 700 B row like a history row. */
function appendCase(dir: string, name: string, schema: string, insert: string, row: (n: number) => unknown[]): Map<string, number> {
  const path = join(dir, `${name}.db`);
  const db = durable(path, schema);
  emptiedWal(db);
  const statement = db.prepare(insert);
  for (let n = 1; n <= STEPS; n++) db.transaction(() => statement.run(...row(n)))();
  const trees = framesByTree(db, path, STEPS);
  db.close();
  return trees;
}

const KEYED = 'CREATE TABLE t (run_id TEXT, version INTEGER, payload TEXT, PRIMARY KEY (run_id, version)) WITHOUT ROWID';

const { dir, cleanup } = tempDir();
try {
  const payload = 'x'.repeat(700);
  const cases: [string, Map<string, number>][] = [
    ['floor insert', appendCase(dir, 'floor', 'CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT NOT NULL)', 'INSERT INTO t (payload) VALUES (?)', () => ['x'.repeat(500)])],
    ['700 B, rowid', appendCase(dir, 'rowid', 'CREATE TABLE t (run_id TEXT, version INTEGER, payload TEXT)', 'INSERT INTO t VALUES (?, ?, ?)', (n) => ['run', n, payload])],
    ['700 B, keyed', appendCase(dir, 'keyed', KEYED, 'INSERT INTO t VALUES (?, ?, ?)', (n) => ['run', n, payload])],
    // Many runs stepping at once append inside the key range, not at its end.
    ['keyed, 8 runs', appendCase(dir, 'keyed-8', KEYED, 'INSERT INTO t VALUES (?, ?, ?)', (n) => [`run-${n % 8}`, n, payload])],
    ['rowid+key, 8', appendCase(dir, 'unique-8', 'CREATE TABLE t (run_id TEXT, version INTEGER, payload TEXT, UNIQUE (run_id, version))', 'INSERT INTO t VALUES (?, ?, ?)', (n) => [`run-${n % 8}`, n, payload])],
    ['engine, 2 B', await stepCase(dir, 'engine', 0)],
    ['engine, 500 B', await stepCase(dir, 'engine', 500)],
    ['worker, 2 B', await stepCase(dir, 'worker', 0)],
    ['worker, 500 B', await stepCase(dir, 'worker', 500)],
  ];
  const trees = [...new Set(cases.flatMap(([, t]) => [...t.keys()]))]
    .sort((a, b) => Math.max(...cases.map(([, t]) => t.get(b) ?? 0)) - Math.max(...cases.map(([, t]) => t.get(a) ?? 0)));
  console.log(`WAL frames (4 KiB pages) written per transaction, ${STEPS} transactions or steps a case, by b-tree; WAL + synchronous=FULL`);
  console.log('b-tree'.padEnd(26), ...cases.map(([name]) => name.padStart(14)));
  for (const tree of trees) console.log(tree.padEnd(26), ...cases.map(([, t]) => (t.has(tree) ? fmt(t.get(tree)!, 2) : '-').padStart(14)));
  const total = (t: Map<string, number>) => [...t.values()].reduce((a, b) => a + b, 0);
  console.log('total'.padEnd(26), ...cases.map(([, t]) => fmt(total(t), 2).padStart(14)));
  console.log('a b-tree past 1.00 frame is splitting pages: a rowid table appending at its end adds one page and its parent\'s entry;'
    + ' a WITHOUT ROWID table (checkpoints, steps: keyed by run) rebalances its last pages with their neighbours, several pages at a time, and its interior pages hold whole rows (below), so they split too;'
    + ' a rowid table with the key as a unique index writes the index\'s page besides (rowid+key, 8: eight runs appending by turns)');
  // Why the keyed table splits so often: an index b-tree's interior cells are whole keys, and a WITHOUT
  // ROWID table's key is its whole row, so its interior pages hold a few rows each where a rowid table's
  // hold hundreds of rowids, and a leaf's split soon splits its parent too.
  for (const [name, shape] of shapes) console.log(`checkpoints after ${name} (${STEPS} steps): ${shape}`);
} finally {
  cleanup();
}
