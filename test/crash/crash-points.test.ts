import { afterEach, describe, expect, it } from 'vitest';
import type { CrashPoint } from '../../lib/engine/deps.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, SimulatedCrash, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel, writeRowsScript } from '../support/stub-model.ts';

const POINTS: CrashPoint[] = ['C1', 'C2', 'C3', 'C4', 'C5', 'C6', 'C7', 'C8'];
const TOTAL = 5;

/**
 * A crash at each point of one step (architecture.md: C1 load ... C8 ack). After a restart on a fresh
 * worker: every side effect applied exactly once, the version history dense, no step skipped or repeated,
 * the run completed.
 */
describe('a crash at every point of a step', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  // Folded: the local runtime's step is one transaction (checkpoint, next message, ack), so C6, C7 and C8
  // all come after it. Unfolded: the send and the ack are their own writes after the checkpoint (as on AWS).
  for (const folded of [true, false]) for (const point of POINTS) {
    it(`${point}${folded ? '' : ' (send and ack after the checkpoint)'}: resumes on another worker, each effect applied once, history dense, run completes`, async () => {
      db = tempDb();
      const clock = new ManualClock();
      const rows = new FakeRows();
      // Step 3's output is large, so step 3 passes C5 (the blob write) too.
      const agent = rowsAgent(rows, { largeOutputAt: [3] });
      const modelA = new StubModel(writeRowsScript(TOTAL));
      const a = workerProcess({ dbPath: db.path, agent, model: modelA, clock, workerId: 'A', crashAt: { point, step: 3 }, queueInCommit: folded });
      await start(a.deps);
      const crash = await drain(a.deps, a.runtime, clock).catch((e: unknown) => e);
      expect(crash).toBeInstanceOf(SimulatedCrash);
      const afterTransaction = ['C6', 'C7', 'C8'].includes(point);
      if (folded && afterTransaction) {
        // Killed right after the step's one transaction: the delivery is acked and the next message (for
        // version 4, which step 3 wrote) is the only one live. Nothing to redeliver, nothing lost.
        const live = a.runtime.db.prepare('SELECT dedup_key, version FROM queue WHERE acked_at IS NULL').all();
        expect(live).toEqual([{ dedup_key: 'run', version: 4 }]);
      }
      a.runtime.close();

      const modelB = new StubModel(writeRowsScript(TOTAL));
      const b = workerProcess({ dbPath: db.path, agent, model: modelB, clock, workerId: 'B', queueInCommit: folded });
      const handledByB = await drain(b.deps, b.runtime, clock);
      // B handles the messages of versions 4, 5 and 6 (steps 4, 5, the completion), after version 3's again
      // when the crash came before the checkpoint (C1-C5). After it (C6-C8), nothing else: the run's queue
      // row, version 3's message, was rewritten by version 4's send (in a folded step's transaction, or
      // before C8), or, with no send, is received at the run's newest version, never as a stale message.
      expect(handledByB).toBe(afterTransaction ? 3 : 4);

      // Exactly-once effects.
      expect(rows.rows.size).toBe(TOTAL);
      for (let n = 1; n <= TOTAL; n++) expect(rows.rows.get(`run/step-${n}`)).toBe(n);
      const state = await loadState(b.runtime);
      expect(state.status).toBe('completed');
      expect(state.steps.map((s) => s.step)).toEqual([1, 2, 3, 4, 5]);
      expect(state.steps.map((s) => s.input)).toEqual([1, 2, 3, 4, 5].map((row) => ({ row })));

      // Dense history: versions 1..N, one checkpoint per step, then the completion.
      const history = await b.runtime.store.history('run');
      expect(history.map((h) => h.version)).toEqual(history.map((_, i) => i + 1));
      expect(history.map((h) => h.step)).toEqual([0, 1, 2, 3, 4, 5, 5]);
      expect(history.at(-1)?.status).toBe('completed');

      // Which side did what depends on where it crashed.
      const modelAsked = [...modelA.stepsAsked(), ...modelB.stepsAsked()];
      const askedForStep3 = modelAsked.filter((s) => s === 3).length;
      // Only a crash between the model's reply and the decision record (C2) pays for a second model call.
      expect(askedForStep3).toBe(point === 'C2' ? 2 : 1);
      const step3Calls = rows.timesReceived('run/step-3');
      // The tool is called again (same key, applied once) only if it ran before the crash and the step was not yet checkpointed.
      expect(step3Calls).toBe(['C4', 'C5'].includes(point) ? 2 : 1);
      const committedBy = state.steps[2]!.workerId;
      expect(committedBy).toBe(['C6', 'C7', 'C8'].includes(point) ? 'A' : 'B');

      // The large output of step 3 is stored by reference and readable after the crash.
      const ref = state.steps[2]!.result.ref!;
      expect(ref).toMatch(/^sha256:/);
      const blob = await b.runtime.blobs.get(ref);
      expect(blob?.toString()).toContain('x'.repeat(10_000));
      expect(state.steps[2]!.result.bytes).toBe(blob!.length);
      b.runtime.close();
    });
  }
});
