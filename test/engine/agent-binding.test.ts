import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, tool, type AgentDefinition } from '../../lib/agent.ts';
import { InvalidInputError } from '../../lib/core/errors.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import { startRun } from '../../lib/engine/start.ts';
import type { ModelReply } from '../../lib/ports.ts';
import { captureLogs } from '../aws/log-capture.ts';
import { ManualClock, drain, loadState, tempDb, workerProcess } from '../support/harness.ts';
import { StubModel } from '../support/stub-model.ts';

/** What the tools of both agents did, in order: the external world the test watches. */
const effects: string[] = [];

const migration = defineAgent({
  name: 'migrate-rows',
  tools: [tool({
    name: 'copy_batch', description: 'Copy one batch.', input: z.object({ batch: z.number().int() }), sideEffect: true,
    run: (input) => { effects.push(`copy_batch ${input.batch}`); return 'copied'; },
  })],
});

const cleanup = defineAgent({
  name: 'cleanup-tables',
  tools: [tool({
    name: 'drop_table', description: 'Drop a table.', input: z.object({ table: z.string() }), sideEffect: true,
    run: (input) => { effects.push(`drop_table ${input.table}`); return 'dropped'; },
  })],
});

const copyTwice = (step: number): ModelReply => step <= 2
  ? { kind: 'tool', tool: 'copy_batch', input: { batch: step } }
  : { kind: 'done', summary: 'copied 2 batches' };
// The cleanup agent's model drops whatever it is pointed at: under a migration goal that is the source table.
const dropSource = (step: number): ModelReply => step === 1
  ? { kind: 'tool', tool: 'drop_table', input: { table: 'source_rows' } }
  : { kind: 'done', summary: 'dropped' };

describe('a worker runs only its own agent\'s runs', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => { db?.cleanup(); effects.length = 0; });

  function worker(agent: AgentDefinition, script: (step: number) => ModelReply, clock: ManualClock, workerId: string) {
    const logs = captureLogs();
    const model = new StubModel(script);
    const w = workerProcess({ dbPath: db.path, agent, model, clock, workerId });
    return { ...w, model, logs, deps: { ...w.deps, log: logs.log } };
  }

  it('hands another agent\'s message back with a clear error, never stepping or writing the run', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const migrator = worker(migration, copyTwice, clock, 'M');
    const cleaner = worker(cleanup, dropSource, clock, 'C');
    await startRun(migrator.deps, { goal: 'copy source_rows into target_rows', runId: 'mig-1' });

    // The cleanup worker gets the migration run's message (a shared queue, a misrouted message).
    const [delivery] = await cleaner.runtime.queue.receive();
    expect(delivery).toBeDefined();
    const handled = await handleDelivery(cleaner.deps, delivery!);
    expect(effects).toEqual([]);
    expect(handled).toEqual({ action: 'release', delayMs: 60_000, runId: 'mig-1' });
    await cleaner.runtime.queue.release(delivery!, handled.action === 'release' ? handled.delayMs : 0);

    expect(cleaner.model.requests).toEqual([]);
    expect(await cleaner.runtime.store.history('mig-1')).toHaveLength(1);
    const error = cleaner.logs.lines.find((l) => l.event === 'wrong-agent');
    expect(error).toMatchObject({ level: 50, runId: 'mig-1', runAgent: 'migrate-rows', workerAgent: 'cleanup-tables', workerId: 'C' });
    expect(error!.msg).toBe(
      'run mig-1 belongs to agent "migrate-rows" but this worker runs agent "cleanup-tables": handed back, not stepped. '
      + 'Run a worker of "migrate-rows"; or, if "migrate-rows" was renamed to "cleanup-tables", add formerNames: ["migrate-rows"] to its defineAgent',
    );

    // The run's own worker takes it once the message is visible again, and finishes it.
    clock.advance(60_000);
    await drain(migrator.deps, migrator.runtime, clock);
    expect(await loadState(migrator.runtime, 'mig-1')).toMatchObject({ status: 'completed', agent: 'migrate-rows', step: 2 });
    expect(effects).toEqual(['copy_batch 1', 'copy_batch 2']);
  });

  it('hands back a run of another agent even at its step cap or past its receive limit: nothing is written', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const migrator = worker(migration, copyTwice, clock, 'M');
    const cleaner = worker(cleanup, dropSource, clock, 'C');
    await startRun(migrator.deps, { goal: 'copy', runId: 'mig-2', stepCap: 1 });
    const body = JSON.stringify({ runId: 'mig-2', version: 1 });
    expect(await handleDelivery(cleaner.deps, { body, receiveCount: 50 })).toEqual({ action: 'release', delayMs: 60_000, runId: 'mig-2' });
    expect(await cleaner.runtime.store.history('mig-2')).toHaveLength(1);
    expect((await loadState(cleaner.runtime, 'mig-2')).status).toBe('running');
  });

  it('leaves another agent\'s message on the local queue for the right worker', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const migrator = worker(migration, copyTwice, clock, 'M');
    const cleaner = worker(cleanup, dropSource, clock, 'C');
    await startRun(migrator.deps, { goal: 'copy source_rows', runId: 'mig-3' });
    await startRun(cleaner.deps, { goal: 'drop the scratch table', runId: 'clean-1' });

    const cleanerQueue = cleaner.runtime.queue.forAgents(['cleanup-tables']);
    const taken = await cleanerQueue.receive({ max: 10 });
    expect(taken.map((d) => JSON.parse(d.body).runId)).toEqual(['clean-1']);
    await cleanerQueue.ack(taken[0]!);
    expect(await cleanerQueue.receive({ max: 10 })).toEqual([]);
    // The next step's message of each run keeps its run's agent, whoever sends it.
    const migratorQueue = migrator.runtime.queue.forAgents(['migrate-rows']);
    const [mine] = await migratorQueue.receive();
    expect(JSON.parse(mine!.body).runId).toBe('mig-3');
    await handleDelivery(migrator.deps, mine!);
    await migratorQueue.ack(mine!);
    expect(await cleanerQueue.receive({ max: 10 })).toEqual([]);
    expect((await migratorQueue.receive()).map((d) => JSON.parse(d.body))).toEqual([{ runId: 'mig-3', version: 2 }]);
  });

  it('lets a renamed agent take its old runs only when it names them in formerNames', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const migrator = worker(migration, copyTwice, clock, 'M');
    await startRun(migrator.deps, { goal: 'copy', runId: 'mig-4' });
    const renamed = defineAgent({ ...migration, name: 'copy-rows' });
    const silentTakeover = worker(renamed, copyTwice, clock, 'R1');
    const [delivery] = await silentTakeover.runtime.queue.receive();
    expect(await handleDelivery(silentTakeover.deps, delivery!)).toMatchObject({ action: 'release' });
    expect(silentTakeover.logs.lines.find((l) => l.event === 'wrong-agent')?.msg).toContain('if "migrate-rows" was renamed to "copy-rows", add formerNames: ["migrate-rows"]');
    expect(effects).toEqual([]);
    expect(await silentTakeover.runtime.queue.forAgents(['copy-rows']).receive()).toEqual([]);

    clock.advance(60_000);
    const declared = worker(defineAgent({ ...migration, name: 'copy-rows', formerNames: ['migrate-rows'] }), copyTwice, clock, 'R2');
    const queue = declared.runtime.queue.forAgents(['copy-rows', 'migrate-rows']);
    for (let d = await queue.receive(); d.length; clock.advance(1), d = await queue.receive()) {
      await handleDelivery(declared.deps, d[0]!);
      await queue.ack(d[0]!);
    }
    expect(await loadState(declared.runtime, 'mig-4')).toMatchObject({ status: 'completed', step: 2 });
    expect(effects).toEqual(['copy_batch 1', 'copy_batch 2']);
  });

  it('refuses to start a run id that belongs to another agent, naming both', async () => {
    db = tempDb();
    const clock = new ManualClock();
    const migrator = worker(migration, copyTwice, clock, 'M');
    const cleaner = worker(cleanup, dropSource, clock, 'C');
    await startRun(migrator.deps, { goal: 'copy', runId: 'mig-5' });
    const again = startRun(cleaner.deps, { goal: 'drop it all', runId: 'mig-5' });
    await expect(again).rejects.toBeInstanceOf(InvalidInputError);
    await expect(startRun(cleaner.deps, { goal: 'drop it all', runId: 'mig-5' })).rejects.toThrow('run mig-5 belongs to agent "migrate-rows", not "cleanup-tables"');
    expect(migrator.runtime.queue.depth()).toBe(1);
  });

  it('refuses an agent that lists its own name, or a blank one, as a former name', () => {
    expect(() => defineAgent({ ...migration, formerNames: ['migrate-rows'] })).toThrow(/formerNames/);
    expect(() => defineAgent({ ...migration, formerNames: [''] })).toThrow(/formerNames/);
  });
});
