/**
 * Where a read-only step's time goes past the floor (one durable SQLite insert), layer by layer, each
 * case interleaved round by round with the floor in the same process:
 *   - one row per step: the lower bound of a step that writes a head and a record: one INSERT into one
 *     b-tree keyed (run, version), four columns, the key's uniqueness as the fence;
 *   - this store's row in raw SQL, as its commit writes a running run's next step: the fence's read (the
 *     runs row and the newest version), then the checkpoint row with its record, head and metadata;
 *   - the previous layout's rows in raw SQL, the baseline of that change: the run's row updated, the step
 *     record in the steps table, the checkpoint row with the head;
 *   - the worker path's transaction: this store's row, plus the queue work a worker's step folds into it
 *     (the delivery acked, the next message sent and received) by the queue's own functions, as its commit
 *     calls them: the run's one queue row handed to the next version, its lease kept (handOver); as the
 *     baselines of the last two changes, the same row sent and received anew each step (enqueueReceived,
 *     which writes the live index too), and the previous queue's statements in raw SQL (the delivery's
 *     row acked, then a new row per version, received);
 *   - this store's commit() (encoding included), states made before timing;
 *   - the engine step: advance() with a stub model and a no-op tool (load, prompt, tool, commit);
 *   - the same engine step on the one-row prototype (bench/one-row-store.ts, a store of only what these
 *     steps need, four columns and no runs row): what the leanest row would give the engine as it is.
 * WAL + synchronous=FULL everywhere, 300 steps a round.
 *
 *   node --import tsx bench/step-layouts.ts [steps-per-round] [rounds]
 *   npm run build && node --import tsx --import ./bench/compiled.mjs bench/step-layouts.ts [steps-per-round] [rounds]   (the compiled code, as npm run bench runs it)
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { encodeHead, encodeStep } from '../lib/core/codec.ts';
import { advance } from '../lib/engine/advance.ts';
import type { EngineDeps } from '../lib/engine/deps.ts';
import { startRun } from '../lib/engine/start.ts';
import { preparedOnce } from '../lib/local/database.ts';
import { openLocalRuntime } from '../lib/local/runtime.ts';
import { ackReceipt, enqueueReceived, handOver } from '../lib/local/sqlite-queue.ts';
import { META, newState, recordFor, stateAfter } from '../test/support/states.ts';
import { openOneRowStore } from './one-row-store.ts';
import { benchDeps, codeMeasured, durable, durableInsertFloor, fmt, instantModel, median, noopAgent, openBenchRuntime, tempDir } from './support.ts';

const STEPS = Number(process.argv[2] ?? 300);
const ROUNDS = Number(process.argv[3] ?? 7);

const perStep = (t0: bigint) => Number(process.hrtime.bigint() - t0) / 1e6 / STEPS;

/** advance() in a loop on a new run each round: the engine step, on whichever store `deps` has. */
const engineCase = (name: string, deps: EngineDeps, prefix: string) => ({
  name,
  async run(round: number): Promise<number> {
    const runId = `${prefix}${round}`;
    await startRun(deps, { goal: 'bench', runId });
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < STEPS; i++) await advance(deps, runId);
    return perStep(t0);
  },
});

async function main(): Promise<void> {
  const { dir, cleanup } = tempDir();
  try {
    // Bytes as a real step writes them: a head and a record of this code's own encoding.
    const head = encodeHead(stateAfter('bench-run', 30));
    const record = encodeStep(recordFor('bench-run', 30));
    const floor = durableInsertFloor(join(dir, 'floor.db'));

    const one = durable(join(dir, 'one.db'), 'CREATE TABLE checkpoints (run_id TEXT, version INTEGER, head TEXT, record TEXT, PRIMARY KEY (run_id, version)) WITHOUT ROWID');
    const oneInsert = one.prepare('INSERT INTO checkpoints VALUES (?, ?, ?, ?)');

    // The local store's own file and schema, written with the statements its commit runs.
    const row = openLocalRuntime({ dbPath: join(dir, 'row.db') });
    const fence = row.db.prepare('SELECT r.status, r.reason, (SELECT max(c.version) FROM checkpoints c WHERE c.run_id = r.run_id) AS version FROM runs r WHERE r.run_id = ?');
    const checkpoint = row.db.prepare(
      'INSERT INTO checkpoints (run_id, version, step, status, tool, idempotency_key, worker_id, code_version, bytes, record, head, reason, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
    );
    // The previous layout, in the same schema (its columns are still there): three b-trees a step.
    const rows = openLocalRuntime({ dbPath: join(dir, 'rows.db') });
    const update = rows.db.prepare("UPDATE runs SET version = version + 1, step = ?, updated_at = ?, restarts = 0 WHERE run_id = ? AND version = ? AND status = 'running' AND reason IS NULL");
    const step = rows.db.prepare('INSERT INTO steps (run_id, step, record) VALUES (?, ?, ?)');
    const history = rows.db.prepare(
      'INSERT INTO checkpoints (run_id, version, step, status, tool, idempotency_key, worker_id, code_version, bytes, head, reason, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
    );

    // The worker path's transaction: the same row, and the queue work its commit carries.
    const worker = openLocalRuntime({ dbPath: join(dir, 'worker.db') });
    const workerFence = worker.db.prepare(fence.source);
    const workerCheckpoint = worker.db.prepare(checkpoint.source);
    const sendEach = openLocalRuntime({ dbPath: join(dir, 'send-each.db') });
    const sendEachFence = sendEach.db.prepare(fence.source);
    const sendEachCheckpoint = sendEach.db.prepare(checkpoint.source);
    const previousQueue = openLocalRuntime({ dbPath: join(dir, 'previous-queue.db') });
    const previousFence = previousQueue.db.prepare(fence.source);
    const previousCheckpoint = previousQueue.db.prepare(checkpoint.source);
    const previousAck = previousQueue.db.prepare('UPDATE queue SET acked_at = ? WHERE id = ? AND receipt = ? AND acked_at IS NULL');
    const previousAny = previousQueue.db.prepare("SELECT 1 FROM queue WHERE acked_at IS NULL AND visible_at <= ? AND (agent IS NULL OR agent IN ('bench')) LIMIT 1");
    const previousReceived = previousQueue.db.prepare(
      `INSERT OR IGNORE INTO queue (dedup_key, run_id, agent, body, visible_at, receive_count, receipt, created_at)
       SELECT ?, run_id, agent, ?, ?, 1, ?, ? FROM runs WHERE run_id = ? AND (agent IS NULL OR agent IN ('bench')) RETURNING id`,
    );
    const receive = worker.queue.forAgents(['bench']).receiveInCommit(30_000);
    const workerCase = (name: string, db: typeof worker.db, fenceOf: typeof fence, checkpointOf: typeof checkpoint,
      queueWork: (runId: string, n: number, receipt: string) => string) => ({
      name,
      async run(round: number): Promise<number> {
        const runId = `w${round}`;
        db.prepare("INSERT INTO runs (run_id, version, status, step, agent, created_at, updated_at) VALUES (?, 1, 'running', 0, 'bench', 0, 0)").run(runId);
        checkpointOf.run(runId, 1, 0, 'running', null, null, 'bench', 'bench', head.length, null, head, null, 0, 1);
        let receipt = '0:none';
        const t0 = process.hrtime.bigint();
        for (let n = 1; n <= STEPS; n++) {
          db.transaction(() => {
            if ((fenceOf.get(runId) as { version: number }).version !== n) throw new Error('bench: the fence refused a write');
            checkpointOf.run(runId, n + 1, n, 'running', 'noop', null, 'bench', 'bench', head.length + record.length, record, head, null, n, n + 1);
            receipt = queueWork(runId, n + 1, receipt);
          })();
        }
        return perStep(t0);
      },
    });

    const store = openLocalRuntime({ dbPath: join(dir, 'store.db') });
    const states = Array.from({ length: STEPS + 1 }, (_, n) => stateAfter('s', n));
    const records = Array.from({ length: STEPS + 1 }, (_, n) => recordFor('s', n));

    const engine = openBenchRuntime(dir, 'engine');
    const deps = benchDeps(engine, noopAgent({ sideEffect: false }), instantModel('noop'));
    const oneRow = openOneRowStore(join(dir, 'one-row.db'));
    const oneRowDeps = { ...benchDeps(engine, noopAgent({ sideEffect: false }), instantModel('noop')), store: oneRow.store };

    const cases: { name: string; run(round: number): Promise<number> }[] = [
      { name: 'floor: one durable SQLite insert (500 B)', run: async () => floor.msPerInsert(STEPS) },
      {
        name: 'one row per step (head + record, fenced by its key)',
        async run(round) {
          const t0 = process.hrtime.bigint();
          for (let v = 2; v <= STEPS + 1; v++) one.transaction(() => oneInsert.run(`r${round}`, v, head, record))();
          return perStep(t0);
        },
      },
      {
        name: "this store's row, raw SQL (fence read + checkpoint row)",
        async run(round) {
          const runId = `r${round}`;
          row.db.prepare("INSERT INTO runs (run_id, version, status, step, agent, created_at, updated_at) VALUES (?, 1, 'running', 0, 'bench', 0, 0)").run(runId);
          checkpoint.run(runId, 1, 0, 'running', null, null, 'bench', 'bench', head.length, null, head, null, 0, 1);
          const t0 = process.hrtime.bigint();
          for (let n = 1; n <= STEPS; n++) {
            row.db.transaction(() => {
              if ((fence.get(runId) as { version: number }).version !== n) throw new Error('bench: the fence refused a write');
              checkpoint.run(runId, n + 1, n, 'running', 'noop', null, 'bench', 'bench', head.length + record.length, record, head, null, n, n + 1);
            })();
          }
          return perStep(t0);
        },
      },
      {
        name: "the previous layout's rows, raw SQL (run, step, history + head)",
        async run(round) {
          const runId = `r${round}`;
          rows.db.prepare("INSERT INTO runs (run_id, version, status, step, agent, created_at, updated_at) VALUES (?, 1, 'running', 0, 'bench', 0, 0)").run(runId);
          const t0 = process.hrtime.bigint();
          for (let n = 1; n <= STEPS; n++) {
            rows.db.transaction(() => {
              update.run(n, n, runId, n);
              step.run(runId, n, record);
              history.run(runId, n + 1, n, 'running', 'noop', null, 'bench', 'bench', head.length + record.length, head, null, n, n + 1);
            })();
          }
          return perStep(t0);
        },
      },
      workerCase("worker path's transaction: the row + this queue's work", worker.db, workerFence, workerCheckpoint, (runId, version, receipt) => {
        const sql = preparedOnce(worker.db);
        const send = { message: { runId, version } };
        const [handed] = handOver(sql, receipt, send, receive, Date.now()) ?? [];
        if (handed) return handed.receipt;
        const [next] = enqueueReceived(sql, send, receive, Date.now()) ?? [];
        ackReceipt(sql, receipt, Date.now());
        if (!next) throw new Error('bench: the step did not receive its next message');
        return next.receipt;
      }),
      workerCase('the same, the row sent and received anew each step', sendEach.db, sendEachFence, sendEachCheckpoint, (runId, version, receipt) => {
        const sql = preparedOnce(sendEach.db);
        const [next] = enqueueReceived(sql, { message: { runId, version } }, receive, Date.now()) ?? [];
        ackReceipt(sql, receipt, Date.now());
        if (!next) throw new Error('bench: the step did not receive its next message');
        return next.receipt;
      }),
      workerCase("the same with the previous queue's rows, raw SQL", previousQueue.db, previousFence, previousCheckpoint, (runId, version, receipt) => {
        const [id, token] = receipt.split(':');
        const now = Date.now();
        previousAck.run(now, Number(id), token);
        if (previousAny.get(now)) throw new Error('bench: another message was visible');
        const next = randomUUID();
        const row = previousReceived.get(`${runId}/v${version}`, JSON.stringify({ runId, version }), now + 30_000, next, now, runId) as { id: number };
        return `${row.id}:${next}`;
      }),
      {
        name: "this store's commit() (encoding + its SQL)",
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
      engineCase('engine step, read-only tool (advance)', deps, 'e'),
      engineCase('engine step on the one-row prototype store', oneRowDeps, 'o'),
    ];
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
    floor.close(); one.close(); row.close(); rows.close(); worker.close(); sendEach.close(); previousQueue.close(); store.close(); engine.close(); oneRow.db.close();
  } finally {
    cleanup();
  }
}

await main();
