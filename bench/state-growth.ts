/**
 * State growth over a 600-step run whose tool outputs are 20 KB to 1 MB: the bytes each checkpoint writes,
 * the resume read (cold, a worker holding nothing: the head, the block summaries and the records after
 * them, next to the old way, the head and every record, measured in the same run; warm: the head and the
 * one record a worker lacks), and
 * the prompt, at steps 1, 60, 200, 300 and 600, with the condensing policy (lib/core/condense.ts) against
 * the baseline of every step listed in full. Also counts the steps whose prompt did not start with the
 * previous step's cached prefix (the cache breaks). SQLite store: each output goes by reference to a blob
 * the checkpoint's transaction writes beside it (CheckpointStore.carriesBlobs), compressed; the write
 * column counts the checkpoint alone, and the blobs are totalled from the file at the end.
 *
 *   node --import tsx bench/state-growth.ts
 */
import { z } from 'zod';
import { defineAgent, tool } from '../lib/agent.ts';
import { decodeState, type StoredCheckpoint } from '../lib/core/codec.ts';
import { condensedBlocks } from '../lib/core/condense.ts';
import { promptText, renderStepPrompt, stepLine, type PromptBlock } from '../lib/core/prompt.ts';
import { advance } from '../lib/engine/advance.ts';
import { startRun } from '../lib/engine/start.ts';
import { benchDeps, instantModel, openBenchRuntime, tempDir } from './support.ts';

const STEPS = 600;
const SIZES = [20_000, 100_000, 500_000, 1_000_000];
const AT = [1, 60, 200, 300, 600];

const agent = defineAgent({
  name: 'bench-growth', settings: { stepCap: STEPS + 1 },
  tools: [tool({
    name: 'copy_batch', description: 'returns a large report', input: z.object({}), sideEffect: true,
    run: (_input, ctx) => `batch ${ctx.step} report `.padEnd(SIZES[ctx.step % SIZES.length]!, 'r'),
  })],
});

const readBytes = (stored: StoredCheckpoint) => Buffer.byteLength(stored.head) + Buffer.byteLength(stored.pending ?? '')
  + [...stored.steps, ...stored.summaries ?? []].reduce((n, s) => n + Buffer.byteLength(s), 0);
const bytes = (blocks: PromptBlock[]) => Buffer.byteLength(promptText(blocks));

interface Row { step: number; output: number; write: number; coldRead: number; coldRecords: number; coldReadAll: number; warmRead: number; prompt: number; promptAllListed: number; summaries: number }

const { dir, cleanup } = tempDir();
const runtime = openBenchRuntime(dir, 'growth');
try {
  const deps = benchDeps(runtime, agent, instantModel('copy_batch'));
  await startRun(deps, { goal: 'copy 600 batches and report on each', runId: 'run' });
  const rows: Row[] = [];
  let previous: PromptBlock[] | undefined;
  const breaks: number[] = [];
  let cachedShare = 0;
  for (let n = 1; n <= STEPS; n++) {
    const result = await advance(deps, 'run');
    if (result.kind !== 'advanced') throw new Error('run stopped early');
    const blocks = renderStepPrompt(result.state);
    if (previous) {
      const marked = previous.findIndex((b) => b.cache) + 1;
      const prefix = promptText(previous.slice(0, marked));
      if (promptText(blocks).startsWith(prefix)) cachedShare += Buffer.byteLength(prefix) / bytes(blocks);
      else breaks.push(n);
    }
    previous = blocks;
    if (AT.includes(n)) {
      const all = (await runtime.store.load('run'))!;
      const cold = (await runtime.store.load('run', { recent: true }))!;
      const warm = (await runtime.store.load('run', { afterStep: n - 1 }))!;
      const state = decodeState(all);
      // The bounded read builds the same prompt as every record.
      if (promptText(renderStepPrompt(decodeState(cold))) !== promptText(renderStepPrompt(state))) throw new Error(`step ${n}: the bounded read builds another prompt`);
      const listed = state.steps.map(stepLine).join('\n');
      const condensed = promptText(blocks);
      const list = condensed.slice(condensed.indexOf('<completed_steps>\n') + 18, condensed.indexOf('\n</completed_steps>'));
      rows.push({
        step: n, output: state.steps[n - 1]!.result.bytes, write: result.bytes,
        coldRead: readBytes(cold), coldRecords: cold.steps.length, coldReadAll: readBytes(all), warmRead: readBytes(warm), prompt: bytes(blocks),
        promptAllListed: bytes(blocks) - Buffer.byteLength(list) + Buffer.byteLength(listed), summaries: condensedBlocks(n),
      });
    }
  }
  // The blobs as the file holds them: this store writes them in the checkpoint's transaction, not through deps.blobs.
  const blobs = runtime.db.prepare('SELECT count(*) AS n, coalesce(sum(bytes), 0) AS bytes, coalesce(sum(length(data)), 0) AS stored FROM blobs').get() as { n: number; bytes: number; stored: number };
  console.log(`a ${STEPS}-step run, tool outputs cycling ${SIZES.map((s) => `${s / 1000} KB`).join(', ')}, each by reference: ${blobs.n} blobs of ${(blobs.bytes / 1e6).toFixed(0)} MB,`
    + ` ${(blobs.stored / 1e3).toFixed(0)} KB as stored compressed (each output is a line and one repeated letter), written in each step's transaction beside the write B below`);
  const header = ['step', 'output B', 'write B', 'cold read B', 'records', 'old cold B', 'warm read B', 'prompt B', 'all listed B', 'summaries'];
  console.log(header.map((h) => h.padStart(13)).join(''));
  for (const r of rows) console.log([r.step, r.output, r.write, r.coldRead, r.coldRecords, r.coldReadAll, r.warmRead, r.prompt, r.promptAllListed, r.summaries].map((v) => String(v).padStart(13)).join(''));
  const at = (n: number) => rows.find((r) => r.step === n)!;
  console.log(`write per checkpoint: ${at(1).write} B at step 1, ${at(600).write} B at step 600; warm resume read ${at(600).warmRead} B at step 600`);
  const maxCold = Math.max(...rows.map((r) => r.coldRead));
  console.log(`cold resume read (summaries + the records after them): ${(at(60).coldRead / 1024).toFixed(0)} KB at step 60, ${(at(600).coldRead / 1024).toFixed(0)} KB at step 600, at most ${(maxCold / 1024).toFixed(0)} KB; the old way (head + every record) ${(at(60).coldReadAll / 1024).toFixed(0)} KB at step 60, ${(at(600).coldReadAll / 1024).toFixed(0)} KB at step 600`);
  console.log(`prompt at step 600: ${(at(600).prompt / 1024).toFixed(1)} KB condensed, ${(at(600).promptAllListed / 1024).toFixed(1)} KB with every step listed (${(at(600).promptAllListed / at(600).prompt).toFixed(1)}x)`);
  console.log(`cache breaks (a step whose prompt does not start with the previous cached prefix): ${breaks.length}, at steps ${breaks.join(', ')}; mean cached share of the other steps' prompts ${(cachedShare / (STEPS - 1 - breaks.length) * 100).toFixed(1)}%`);
} finally {
  runtime.close();
  cleanup();
}
