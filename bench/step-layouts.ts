/**
 * Where a read-only step's time goes past the floor (one durable SQLite insert), layer by layer, each
 * case interleaved round by round with the floor in the same process:
 *   - this store's row in raw SQL, as its commit writes a running run's next step: the fence's read (the
 *     runs row and the newest version, found by the run's key range), then the checkpoint row with its
 *     record, head and metadata, keyed by the run's number and the version (a rowid table);
 *   - the keyed row before that change, the baseline: the same columns in a WITHOUT ROWID table keyed
 *     (run_id, version), as older files held them, with its fence;
 *   - the worker path's transaction: this store's row, plus the queue work a worker's step folds into it
 *     by the queue's own functions, as its commit calls them (the run's one queue row handed to the next
 *     version, its lease kept: handOver); and the same on the keyed row, the baseline;
 *   - this store's commit() (encoding included), states made before timing;
 *   - the engine step: advance() with a stub model and a no-op tool (load, prompt, tool, commit).
 * WAL + synchronous=FULL everywhere, 300 steps a round. Every file's WAL has started again from its
 * beginning before the timed rounds (walRestarts), so every commit overwrites WAL pages, as in a database
 * in use for a while, the floor's too.
 *
 *   node --import tsx bench/step-layouts.ts [steps-per-round] [rounds]
 *   npm run build && node --import tsx --import ./bench/compiled.mjs bench/step-layouts.ts [steps-per-round] [rounds]   (the compiled code, as npm run bench runs it)
 */
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import { encodeHead, encodeStep } from '../lib/core/codec.ts';
import { advance } from '../lib/engine/advance.ts';
import type { EngineDeps } from '../lib/engine/deps.ts';
import { startRun } from '../lib/engine/start.ts';
import { checkpointKey, latestVersionOf, preparedOnce } from '../lib/local/database.ts';
import { openLocalRuntime } from '../lib/local/runtime.ts';
import { ackReceipt, enqueueReceived, handOver } from '../lib/local/sqlite-queue.ts';
import { META, newState, recordFor, stateAfter } from '../test/support/states.ts';
import { benchCounts } from './args-support.ts';
import { benchDeps, codeMeasured, durableInsertFloor, fmt, instantModel, median, noopAgent, openBenchRuntime, tempDir } from './support.ts';
import { walRestarts } from './wal-support.ts';

const [STEPS, ROUNDS] = benchCounts([{ name: 'steps-per-round', fallback: 300 }, { name: 'rounds', fallback: 7 }]) as [number, number];

const perStep = (t0: bigint) => Number(process.hrtime.bigint() - t0) / 1e6 / STEPS;

/** advance() in a loop on a new run each round: the engine step. */
const engineCase = (name: string, path: string, deps: EngineDeps, prefix: string) => ({
  name, path,
  async run(round: number): Promise<number> {
    const runId = `${prefix}${round}`;
    await startRun(deps, { goal: 'bench', runId });
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < STEPS; i++) await advance(deps, runId);
    return perStep(t0);
  },
});

const COLUMNS = 'run_id, version, step, status, tool, idempotency_key, worker_id, code_version, bytes, record, head, reason, created_at, expires_at';

/**
 * A running run's checkpoint rows written as a commit writes them, in raw SQL: on the local runtime's own
 * file and schema (`keyed: false`), or with the checkpoints table of older files, keyed (run_id, version)
 * WITHOUT ROWID (`keyed: true`, the baseline). `begin(runId)` makes the run and its first row; `write` is
 * one step's fence and row, to be called inside a transaction.
 */
function checkpointRows(db: Database.Database, keyed: boolean) {
  if (keyed) {
    db.exec(`DROP TABLE checkpoints; CREATE TABLE checkpoints (run_id TEXT NOT NULL, version INTEGER NOT NULL, step INTEGER NOT NULL, status TEXT NOT NULL,
      tool TEXT, idempotency_key TEXT, worker_id TEXT NOT NULL, code_version TEXT NOT NULL, bytes INTEGER NOT NULL, record TEXT, head TEXT NOT NULL,
      reason TEXT, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, PRIMARY KEY (run_id, version)) WITHOUT ROWID`);
  }
  const fence = db.prepare(keyed
    ? 'SELECT r.run_no, (SELECT max(c.version) FROM checkpoints c WHERE c.run_id = r.run_id) AS version FROM runs r WHERE r.run_id = ?'
    : `SELECT r.run_no, ${latestVersionOf('r.run_no')} AS version FROM runs r WHERE r.run_id = ?`);
  const insert = db.prepare(keyed
    ? `INSERT INTO checkpoints (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
    : `INSERT INTO checkpoints (id, run_no, ${COLUMNS}) VALUES (${checkpointKey('?', '?')}, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
  const row = (runNo: number, runId: string, version: number, step: number, head: string, record: string | null) => {
    const values = [runId, version, step, 'running', record ? 'noop' : null, null, 'bench', 'bench', head.length + (record?.length ?? 0), record, head, null, step, step + 1];
    insert.run(...(keyed ? values : [runNo, version, runNo, ...values]));
  };
  return {
    begin(runId: string, head: string): void {
      const { run_no: runNo } = db.prepare("INSERT INTO runs (run_id, run_no, version, status, step, agent, created_at, updated_at) VALUES (?, (SELECT coalesce(max(run_no), 0) + 1 FROM runs), 1, 'running', 0, 'bench', 0, 0) RETURNING run_no")
        .get(runId) as { run_no: number };
      row(runNo, runId, 1, 0, head, null);
    },
    write(runId: string, n: number, head: string, record: string): void {
      const current = fence.get(runId) as { run_no: number; version: number };
      if (current.version !== n) throw new Error('bench: the fence refused a write');
      row(current.run_no, runId, n + 1, n, head, record);
    },
  };
}

async function main(): Promise<void> {
  const { dir, cleanup } = tempDir();
  try {
    // Bytes as a real step writes them: a head and a record of this code's own encoding.
    const head = encodeHead(stateAfter('bench-run', 30));
    const record = encodeStep(recordFor('bench-run', 30));
    const floor = durableInsertFloor(join(dir, 'floor.db'));
    const opened: { close(): void }[] = [floor];
    const runtime = (name: string) => {
      const r = openLocalRuntime({ dbPath: join(dir, `${name}.db`) });
      opened.push(r);
      return r;
    };

    /** This store's row, or the keyed one, alone a step: the fence's read and the insert. */
    const rowCase = (name: string, file: string, keyed: boolean) => {
      const { db } = runtime(file);
      const rows = checkpointRows(db, keyed);
      return {
        name, path: join(dir, `${file}.db`),
        async run(round: number): Promise<number> {
          const runId = `r${round}`;
          rows.begin(runId, head);
          const t0 = process.hrtime.bigint();
          for (let n = 1; n <= STEPS; n++) db.transaction(() => rows.write(runId, n, head, record))();
          return perStep(t0);
        },
      };
    };

    /** The worker path's transaction: the row, and the queue work its commit carries (handOver, else send and receive). */
    const workerCase = (name: string, file: string, keyed: boolean) => {
      const worker = runtime(file);
      const rows = checkpointRows(worker.db, keyed);
      const receive = worker.queue.forAgents(['bench']).receiveInCommit(30_000);
      const sql = preparedOnce(worker.db);
      return {
        name, path: join(dir, `${file}.db`),
        async run(round: number): Promise<number> {
          const runId = `w${round}`;
          rows.begin(runId, head);
          let receipt = '0:none';
          const t0 = process.hrtime.bigint();
          for (let n = 1; n <= STEPS; n++) {
            worker.db.transaction(() => {
              rows.write(runId, n, head, record);
              const send = { message: { runId, version: n + 1 } };
              const [handed] = handOver(sql, receipt, send, receive, Date.now())?.received ?? [];
              if (handed) { receipt = handed.receipt; return; }
              const [next] = enqueueReceived(sql, send, receive, Date.now()) ?? [];
              ackReceipt(sql, receipt, Date.now());
              if (!next) throw new Error('bench: the step did not receive its next message');
              receipt = next.receipt;
            })();
          }
          const ms = perStep(t0);
          // The run's queue row goes, untimed, so that the next round's run is alone on the queue.
          worker.db.prepare('DELETE FROM queue WHERE run_id = ?').run(runId);
          return ms;
        },
      };
    };

    const store = runtime('store');
    const states = Array.from({ length: STEPS + 1 }, (_, n) => stateAfter('s', n));
    const records = Array.from({ length: STEPS + 1 }, (_, n) => recordFor('s', n));

    const engine = openBenchRuntime(dir, 'engine');
    opened.push(engine);
    const deps = benchDeps(engine, noopAgent({ sideEffect: false }), instantModel('noop'));

    const cases: { name: string; path: string; run(round: number): Promise<number> }[] = [
      { name: 'floor: one durable SQLite insert (500 B)', path: join(dir, 'floor.db'), run: async () => floor.msPerInsert(STEPS) },
      rowCase("this store's row, raw SQL (fence read + checkpoint row)", 'row', false),
      rowCase('the same, keyed (run_id, version) WITHOUT ROWID (before)', 'keyed-row', true),
      workerCase("worker path's transaction: the row + this queue's work", 'worker', false),
      workerCase('the same on the keyed row (before)', 'keyed-worker', true),
      {
        name: "this store's commit() (encoding + its SQL)", path: join(dir, 'store.db'),
        async run(round) {
          const runId = `s${round}`;
          await store.store.create(newState(runId), META);
          const t0 = process.hrtime.bigint();
          for (let n = 1; n <= STEPS; n++) {
            await store.store.commit({ runId, expectedVersion: n, state: { ...states[n]!, runId }, appended: { ...records[n]!, idempotencyKey: `${runId}/step-${n}` }, ...META });
          }
          return perStep(t0);
        },
      },
      engineCase('engine step, read-only tool (advance)', join(dir, 'engine.db'), deps, 'e'),
    ];
    // Untimed rounds until every file's WAL has started again (bench/support.ts, walRestarts).
    let warm = -1;
    for (const c of cases) while (walRestarts(c.path) < 1) await c.run(warm--);
    const results = cases.map(() => [] as number[]);
    for (let round = 0; round <= ROUNDS; round++) {
      for (const [i, c] of cases.entries()) {
        const ms = await c.run(round);
        if (round > 0) results[i]!.push(ms); // round 0 warms caches and the JIT
      }
    }
    const floorMs = median(results[0]!);
    console.log(`per-step time, ${STEPS} steps x ${ROUNDS} rounds (median of rounds), WAL + synchronous=FULL; head ${head.length} B, record ${record.length} B`+ `; ${codeMeasured()}`);
    console.log('case'.padEnd(64), 'ms/step'.padStart(8), 'x floor'.padStart(8), 'min..max'.padStart(14));
    for (const [i, c] of cases.entries()) {
      const xs = results[i]!;
      console.log(c.name.padEnd(64), fmt(median(xs), 3).padStart(8), fmt(median(xs) / floorMs, 2).padStart(8), `${fmt(Math.min(...xs), 3)}..${fmt(Math.max(...xs), 3)}`.padStart(14));
    }
    for (const o of opened) o.close();
  } finally {
    cleanup();
  }
}

await main();
