/**
 * What a 60-step run stores and writes, with 500 B and 20 KB tool outputs. Baseline in the same run: the
 * bytes a full-snapshot checkpointer would write (the whole state, every step record included, at every
 * step), computed from the same states.
 *
 *   node --import tsx bench/storage-growth.ts
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { canonicalJson } from '../lib/core/canonical-json.ts';
import { decodeState } from '../lib/core/codec.ts';
import { advance } from '../lib/engine/advance.ts';
import { startRun } from '../lib/engine/start.ts';
import { benchDeps, instantModel, noopAgent, openBenchRuntime, tempDir } from './support.ts';

const STEPS = 60;

async function measure(dir: string, outputBytes: number) {
  const name = `growth-${outputBytes}`;
  const runtime = openBenchRuntime(dir, name);
  const deps = benchDeps(runtime, noopAgent({ sideEffect: true, outputBytes, stepCap: STEPS + 1 }), instantModel('noop'));
  const runId = 'run';
  await startRun(deps, { goal: 'write 60 outputs', runId });
  let snapshotTotal = 0;
  let snapshotAt1 = 0;
  let snapshotAt60 = 0;
  let readAt60 = 0;
  for (let i = 1; i <= STEPS; i++) {
    const result = await advance(deps, runId);
    if (result.kind !== 'advanced') throw new Error('run stopped early');
    // The full-snapshot baseline: the whole state serialized at every step.
    const snapshot = Buffer.byteLength(canonicalJson(result.state));
    snapshotTotal += snapshot;
    if (i === 1) snapshotAt1 = snapshot;
    if (i === STEPS) snapshotAt60 = snapshot;
  }
  const stored = (await runtime.store.load(runId))!;
  readAt60 = Buffer.byteLength(stored.head) + stored.steps.reduce((n, s) => n + Buffer.byteLength(s), 0) + Buffer.byteLength(stored.pending ?? '');
  const state = decodeState(stored);
  const history = await runtime.store.history(runId);
  const writtenAt = (step: number) => history.find((h) => h.step === step && h.tool)!.bytes;
  const checkpointBytes = history.reduce((n, h) => n + h.bytes, 0);
  const blobBytes = (runtime.db.prepare('SELECT coalesce(sum(bytes), 0) AS n FROM blobs').get() as { n: number }).n;
  runtime.db.pragma('wal_checkpoint(TRUNCATE)');
  const fileBytes = statSync(join(dir, `${name}.db`)).size;
  runtime.close();
  return { outputBytes, steps: state.step, writtenAt1: writtenAt(1), writtenAt60: writtenAt(STEPS), checkpointBytes, blobBytes, fileBytes, readAt60, snapshotAt1, snapshotAt60, snapshotTotal };
}

const { dir, cleanup } = tempDir();
try {
  const rows = [await measure(dir, 500), await measure(dir, 20_000)];
  console.log(`a ${STEPS}-step run; bytes (checkpoints = head + appended step record, blobs = outputs over 4 KB by reference)`);
  const header = ['output', 'write@1', 'write@60', 'checkpoints', 'blobs', 'db file', 'read@60', 'snapshot write@1', 'snapshot write@60', 'snapshot total'];
  console.log(header.map((h) => h.padStart(12)).join(' '));
  for (const r of rows) {
    console.log([r.outputBytes, r.writtenAt1, r.writtenAt60, r.checkpointBytes, r.blobBytes, r.fileBytes, r.readAt60, r.snapshotAt1, r.snapshotAt60, r.snapshotTotal].map((v) => String(v).padStart(12)).join(' '));
  }
  for (const r of rows) {
    console.log(`${r.outputBytes} B outputs: step 60 writes ${(r.writtenAt60 / r.writtenAt1).toFixed(2)}x what step 1 writes; a full snapshot at step 60 would write ${(r.snapshotAt60 / r.writtenAt60).toFixed(1)}x as much, ${(r.snapshotTotal / r.checkpointBytes).toFixed(1)}x in total over the run`);
  }
} finally {
  cleanup();
}
