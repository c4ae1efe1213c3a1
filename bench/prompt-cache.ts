/**
 * Prompt caching on a long run: a 60-step scripted run through the Anthropic adapter (the real SDK)
 * against the local Messages server, which reports usage with a simulated prompt cache.
 *
 * Prints, per output size (500 B, 20 KB and 200 KB tool outputs):
 * - the share of each step's prompt that is a cache-marked, block-identical prefix of the next step's
 *   prompt (min / median from step 10 on; target >= 90%),
 * - billed input with caching vs without, from the usage the server reported and the published prices
 *   (target <= 30%),
 * - the prompt size at step 60 (target: bounded, not growing with the output size).
 * Run: node --import tsx bench/prompt-cache.ts
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { defineAgent, tool } from '../lib/agent.ts';
import type { Usage } from '../lib/core/state.ts';
import { advance } from '../lib/engine/advance.ts';
import type { EngineDeps } from '../lib/engine/deps.ts';
import { startRun } from '../lib/engine/start.ts';
import { AnthropicModel, DEFAULT_MODEL } from '../lib/llm/anthropic.ts';
import { estimateCost, estimateUncachedCost, priceOf, promptTokens } from '../lib/llm/cost.ts';
import { silentLogger } from '../lib/log.ts';
import { openLocalRuntime } from '../lib/local/runtime.ts';
import { systemClock } from '../lib/ports.ts';
import {
  completedStepLines, startMessagesServer, toolUse, type RecordedRequest,
} from '../test/support/messages-server.ts';

const STEPS = 60;
const FROM_STEP = 10;
/** The documented minimum cacheable prefix of the Claude 5 family; older models need 1,024 to 4,096. */
const MIN_CACHEABLE_TOKENS = 512;
const MODEL = DEFAULT_MODEL;

interface RunFigures {
  outputBytes: number;
  requests: RecordedRequest[];
  shares: number[];
  usages: Usage[];
}

interface SentBlock { text: string; cache_control?: unknown }

async function scriptedRun(outputBytes: number): Promise<RunFigures> {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-bench-cache-'));
  const server = await startMessagesServer({ minCacheableTokens: MIN_CACHEABLE_TOKENS });
  const runtime = openLocalRuntime({ dbPath: join(dir, 'bench.db') });
  try {
    // Each step copies one batch; its output differs per step, as real tool outputs do.
    const agent = defineAgent({
      name: 'copy-batches',
      settings: { stepCap: STEPS },
      tools: [tool({
        name: 'copy_batch',
        description: 'Copy one batch of rows from the source table to the target table.',
        input: z.object({ batch: z.number().int().positive() }),
        sideEffect: true,
        run: (input) => `copied batch ${input.batch}: rows ${input.batch * 1000 - 999}..${input.batch * 1000}; `.padEnd(outputBytes, `row-${input.batch} `),
      })],
    });
    server.otherwise((request) => toolUse('copy_batch', { batch: completedStepLines(request.userText).length + 1 }));
    const model = new AnthropicModel({ apiKey: 'bench-key', baseURL: server.url, env: {}, model: MODEL });
    const deps: EngineDeps = {
      store: runtime.store, blobs: runtime.blobs, ledger: runtime.ledger, queue: runtime.queue, model, agent,
      clock: systemClock, workerId: 'bench', codeVersion: 'bench', log: silentLogger,
    };
    await startRun(deps, { goal: 'Copy the 60 batches of the orders table to the new cluster, one batch per step.', runId: `cache-${outputBytes}` });
    for (let i = 0; i <= STEPS; i++) {
      const outcome = await advance(deps, `cache-${outputBytes}`);
      if (outcome.kind !== 'advanced' || outcome.state.status !== 'running') break;
    }
    // The figures are of the 60 steps; at the cap the model is asked once more (only DONE would end the run there).
    const requests = server.requests.slice(0, STEPS);
    const usages = requests.map((r) => ({
      inputTokens: r.usage!.input_tokens, outputTokens: r.usage!.output_tokens,
      cacheWriteTokens: r.usage!.cache_creation_input_tokens, cacheReadTokens: r.usage!.cache_read_input_tokens,
    }));
    return { outputBytes, requests, shares: stableShares(requests), usages };
  } finally {
    runtime.close();
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * For step n: bytes of its prompt up to and including its cache-marked block, if those blocks are
 * byte-identical to the first blocks of step n + 1's prompt (0 otherwise), over the prompt's bytes.
 */
function stableShares(requests: RecordedRequest[]): number[] {
  const blocksOf = (r: RecordedRequest) => r.body!.messages![0]!.content as SentBlock[];
  const shares: number[] = [];
  for (let n = 0; n + 1 < requests.length; n++) {
    const now = blocksOf(requests[n]!);
    const next = blocksOf(requests[n + 1]!);
    const cut = now.findLastIndex((b) => b.cache_control) + 1;
    const same = cut > 0 && now.slice(0, cut).every((b, i) => next[i]?.text === b.text);
    const prefixBytes = Buffer.byteLength(now.slice(0, cut).map((b) => b.text).join(''));
    shares.push(same ? prefixBytes / Buffer.byteLength(requests[n]!.userText) : 0);
  }
  return shares;
}

/** Input billed in base-input-token equivalents: cache writes at their premium, reads at their discount. */
function billedInput(usage: Usage): number {
  const price = priceOf(MODEL)!;
  return usage.inputTokens + usage.cacheWriteTokens * (price.cacheWrite / price.input) + usage.cacheReadTokens * (price.cacheRead / price.input);
}

const sum = (xs: number[]): number => xs.reduce((a, b) => a + b, 0);
const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;
const kb = (bytes: number): string => `${(bytes / 1024).toFixed(1)} KB`;
const usd = (x: number): string => `$${x.toFixed(4)}`;

function summarize(run: RunFigures) {
  const tail = run.shares.slice(FROM_STEP - 1);
  const billed = sum(run.usages.map(billedInput));
  const uncached = sum(run.usages.map(promptTokens));
  const cost = sum(run.usages.map((u) => estimateCost(u, MODEL)!.usd));
  const costUncached = sum(run.usages.map((u) => estimateUncachedCost(u, MODEL)!));
  const last = run.requests[run.requests.length - 1]!;
  return {
    outputs: run.outputBytes >= 1024 ? kb(run.outputBytes) : `${run.outputBytes} B`,
    steps: run.requests.length,
    shareMin: pct(Math.min(...tail)),
    shareMedian: pct(median(tail)),
    billedVsUncached: pct(billed / uncached),
    billedTokens: Math.round(billed),
    uncachedTokens: uncached,
    costCached: usd(cost),
    costUncached: usd(costUncached),
    promptAt60: kb(Buffer.byteLength(last.userText)),
  };
}

const small = await scriptedRun(500);
const large = await scriptedRun(20 * 1024);
// Ten times larger again: the prompt must not follow the outputs up.
const huge = await scriptedRun(200 * 1024);

console.log(`Prompt caching over a ${STEPS}-step run, ${MODEL} prices, minimum cacheable prefix ${MIN_CACHEABLE_TOKENS} tokens, tokens ~ bytes/4`);
console.table([summarize(small), summarize(large), summarize(huge)]);

console.log('Per step, 500 B outputs (usage as reported by the local server):');
console.table([1, 2, 5, 10, 20, 30, 40, 50, 60].map((n) => {
  const u = small.usages[n - 1]!;
  return {
    step: n,
    prompt: kb(Buffer.byteLength(small.requests[n - 1]!.userText)),
    stableShare: n < STEPS ? pct(small.shares[n - 1]!) : '-',
    input: u.inputTokens, cacheWrite: u.cacheWriteTokens, cacheRead: u.cacheReadTokens,
    billedVsUncached: pct(billedInput(u) / promptTokens(u)),
  };
}));
console.log('Targets: stable share >= 90% (median from step 10), billed input <= 30% of uncached, prompt at step 60 bounded regardless of output size.');
