/**
 * The pages a step writes, by b-tree: WAL frames per step of the engine step and of the worker path (500 B
 * and 2 B tool outputs), next to the floor's one insert, and to one 700 B row appended per transaction to a
 * table keyed as the checkpoints are (by one integer, the run's number and the version) and as they were
 * (run_id, version) WITHOUT ROWID, for one run and for eight by turns (the split cost of each). Counted from the
 * WAL itself (automatic checkpoints off, so every frame written stays in it) and mapped to b-trees with
 * SQLite's dbstat table. Frames, not time: bench/frame-cost.ts prices a frame.
 *
 *   node --import tsx bench/step-pages.ts [steps]
 */
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { advance } from '../lib/engine/advance.ts';
import { startRun } from '../lib/engine/start.ts';
import { checkpointKey } from '../lib/local/database.ts';
import { benchCounts } from './args-support.ts';
import { benchDeps, durable, fmt, instantModel, noopAgent, openBenchRuntime, tempDir, workerPathMsPerStep } from './support.ts';
import { emptiedWal, framesByTree } from './wal-support.ts';

const [STEPS] = benchCounts([{ name: 'steps', fallback: 300 }]) as [number];

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

/** The checkpoints' layout before, and this store's: keyed (run_id, version) WITHOUT ROWID, and by one integer (lib/local/database.ts). */
const KEYED = 'CREATE TABLE t (run_id TEXT, version INTEGER, payload TEXT, PRIMARY KEY (run_id, version)) WITHOUT ROWID';
const NUMBERED = 'CREATE TABLE t (id INTEGER PRIMARY KEY, run_id TEXT, version INTEGER, payload TEXT)';
/** Row n of `runs` runs appending by turns: its run and its version in that run. */
const turn = (n: number, runs: number) => ({ run: n % runs, version: Math.ceil(n / runs) });

const { dir, cleanup } = tempDir();
try {
  const payload = 'x'.repeat(700);
  const keyed = (runs: number) => appendCase(dir, `keyed-${runs}`, KEYED, 'INSERT INTO t VALUES (?, ?, ?)', (n) => [`run-${turn(n, runs).run}`, turn(n, runs).version, payload]);
  const numbered = (runs: number) => appendCase(dir, `numbered-${runs}`, NUMBERED, `INSERT INTO t VALUES (${checkpointKey('?', '?')}, ?, ?, ?)`,
    (n) => [turn(n, runs).run + 1, turn(n, runs).version, `run-${turn(n, runs).run}`, turn(n, runs).version, payload]);
  const cases: [string, Map<string, number>][] = [
    ['floor insert, 500 B', appendCase(dir, 'floor', 'CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT NOT NULL)', 'INSERT INTO t (payload) VALUES (?)', () => ['x'.repeat(500)])],
    ['700 B, numbered', numbered(1)],
    ['700 B, keyed', keyed(1)],
    // Many runs stepping at once append inside the key range, not at its end.
    ['numbered, 8 runs', numbered(8)],
    ['keyed, 8 runs', keyed(8)],
    ['engine, 2 B', await stepCase(dir, 'engine', 0)],
    ['engine, 500 B', await stepCase(dir, 'engine', 500)],
    ['worker, 2 B', await stepCase(dir, 'worker', 0)],
    ['worker, 500 B', await stepCase(dir, 'worker', 500)],
  ];
  const trees = [...new Set(cases.flatMap(([, t]) => [...t.keys()]))]
    .sort((a, b) => Math.max(...cases.map(([, t]) => t.get(b) ?? 0)) - Math.max(...cases.map(([, t]) => t.get(a) ?? 0)));
  console.log(`WAL frames (4 KiB pages) written per transaction, ${STEPS} transactions or steps a case, by b-tree; WAL + synchronous=FULL`);
  // Each column as wide as its name: 14 ran '700 B, keyed' into 'numbered, 8 runs', and the floor's 500 B insert read as 700 B.
  const width = Math.max(...cases.map(([name]) => name.length)) + 2;
  console.log('b-tree'.padEnd(26), ...cases.map(([name]) => name.padStart(width)));
  for (const tree of trees) console.log(tree.padEnd(26), ...cases.map(([, t]) => (t.has(tree) ? fmt(t.get(tree)!, 2) : '-').padStart(width)));
  const total = (t: Map<string, number>) => [...t.values()].reduce((a, b) => a + b, 0);
  console.log('total'.padEnd(26), ...cases.map(([, t]) => fmt(total(t), 2).padStart(width)));
  console.log('a b-tree past 1.00 frame is splitting pages. One run appending at the end of a table keyed by an integer writes the last leaf, and'
    + ' its parent only when a new leaf begins; keyed (run_id, version) WITHOUT ROWID, a row is its own key, interior pages hold a few whole'
    + ' rows each, and a leaf\'s split soon splits its parent too. Runs appending by turns insert inside the key range, not at its end:'
    + ' either table then rebalances a leaf with its neighbours, several pages at a time');
  for (const [name, shape] of shapes) console.log(`checkpoints after ${name} (${STEPS} steps): ${shape}`);
} finally {
  cleanup();
}
