import { unheldBlocks } from '../core/unheld-blocks.ts';
import type { BlockCost, CondensedBlock, Usage } from '../core/state.ts';

/**
 * Estimated USD cost of model usage from Anthropic's published per-million-token (MTok) prices.
 *
 * Sources (stored copies of the docs, read November 2026):
 * - Pricing page, "Model pricing" table: https://platform.claude.com/docs/en/about-claude/pricing
 *   (Fable 5.1, Fable 5, Opus 5, Opus 4.x, Sonnet 4.x, Haiku 4.5 rows).
 * - Model pages: https://platform.claude.com/docs/zh-CN/models/opus-5-5/overview ($4 / $20, 5m write $5,
 *   read $0.20); https://platform.claude.com/docs/zh-CN/models/sonnet-5-5/overview ($2 / $10, 5m write
 *   $2.50, read $0.20 at launch); https://platform.claude.com/docs/zh-CN/models/sonnet-5/overview;
 *   https://platform.claude.com/docs/en/models/haiku-5-5/overview ("from $0.10 / $0.50");
 *   https://platform.claude.com/docs/en/models/overview (Fable 5.2 at $8 / $40; "start with Claude Opus 5.5").
 * - Where those pages gave no figure or an older one, release notes of price trackers that follow the
 *   pricing page: Sonnet 5.5 cache reads cut from $0.20 to $0.10 on 2026-10-07 (kurofune/claudit v1.9.2,
 *   TheKrush/PromptFuel v1.0.23); Haiku 5.5's two prompt-length bands (same sources); Fable 5.2 cache
 *   rates (archid21/rightsize v0.10.2). Re-check these against the pricing page before billing anyone.
 *
 * The standard multipliers are a 5-minute cache write at 1.25x base input and a cache read at 0.1x; the
 * newest models (Fable 5.1+, Opus 5.5, Sonnet 5.5) read the cache for less, so each row states its rates.
 * We only write 5-minute cache entries, so the 1-hour write price is not needed.
 */

export interface Rates {
  /** USD per million tokens. */
  input: number;
  output: number;
  /** 5-minute cache write. */
  cacheWrite: number;
  cacheRead: number;
}

export interface ModelPrice extends Rates {
  /** A second band for long prompts: every token of such a request is billed at these rates. */
  longPrompt?: { overTokens: number; rates: Rates };
}

export const CACHE_WRITE_MULTIPLIER = 1.25;
export const CACHE_READ_MULTIPLIER = 0.1;
const PER_MILLION = 1_000_000;

function standard(input: number, output: number): ModelPrice {
  return { input, output, cacheWrite: input * CACHE_WRITE_MULTIPLIER, cacheRead: input * CACHE_READ_MULTIPLIER };
}

export const MODEL_PRICES: Readonly<Record<string, ModelPrice>> = {
  'claude-fable-5-2': { input: 8, output: 40, cacheWrite: 10, cacheRead: 0.2 },
  'claude-fable-5-1': { input: 10, output: 50, cacheWrite: 12.5, cacheRead: 0.25 },
  'claude-mythos-5-1': { input: 10, output: 50, cacheWrite: 12.5, cacheRead: 0.25 },
  'claude-fable-5': standard(10, 50),
  'claude-mythos-5': standard(10, 50),
  'claude-opus-5-5': { input: 4, output: 20, cacheWrite: 5, cacheRead: 0.2 },
  'claude-opus-5': standard(5, 25),
  'claude-opus-4-8': standard(5, 25),
  'claude-opus-4-7': standard(5, 25),
  'claude-opus-4-6': standard(5, 25),
  'claude-opus-4-5': standard(5, 25),
  'claude-opus-4-1': standard(15, 75),
  'claude-opus-4': standard(15, 75),
  'claude-sonnet-5-5': { input: 2, output: 10, cacheWrite: 2.5, cacheRead: 0.1 },
  'claude-sonnet-5': standard(2, 10),
  'claude-sonnet-4-6': standard(3, 15),
  'claude-sonnet-4-5': standard(3, 15),
  'claude-sonnet-4': standard(3, 15),
  'claude-haiku-5-5': {
    ...standard(0.1, 0.5),
    longPrompt: { overTokens: 100_000, rates: standard(0.5, 2.5) },
  },
  'claude-haiku-4-5': standard(1, 5),
};

/**
 * The prices of a model id: exact, else without a snapshot date suffix (claude-haiku-4-5-20251001), else
 * as the API's `-0` alias of a family's first model (claude-opus-4-0 is claude-opus-4). Undefined for any
 * other id, a newer version of a listed family included: its family's price is no guide (Opus 4.1 was $15
 * per MTok of input, Opus 4.5 $5), and taken by prefix, claude-opus-4-9 was priced as Opus 4 and
 * claude-opus-5-6 as Opus 5, silently, where an unknown model says it has no price and stops a dollar budget.
 */
export function priceOf(model: string): ModelPrice | undefined {
  const undated = model.replace(/-\d{8}$/, '');
  return MODEL_PRICES[model] ?? MODEL_PRICES[undated] ?? (undated.endsWith('-0') ? MODEL_PRICES[undated.slice(0, -2)] : undefined);
}

export interface CostEstimate {
  usd: number;
  inputUsd: number;
  outputUsd: number;
  cacheWriteUsd: number;
  cacheReadUsd: number;
}

/**
 * Cost of one request's usage. For a whole run, sum the per-step estimates: a long-prompt band applies
 * per request, so pricing summed usage at once could pick the wrong band. Undefined for an unknown model.
 */
export function estimateCost(usage: Usage, model: string): CostEstimate | undefined {
  const price = priceOf(model);
  if (!price) return undefined;
  const rates = ratesFor(price, promptTokens(usage));
  const inputUsd = (usage.inputTokens * rates.input) / PER_MILLION;
  const outputUsd = (usage.outputTokens * rates.output) / PER_MILLION;
  const cacheWriteUsd = (usage.cacheWriteTokens * rates.cacheWrite) / PER_MILLION;
  const cacheReadUsd = (usage.cacheReadTokens * rates.cacheRead) / PER_MILLION;
  return { usd: inputUsd + outputUsd + cacheWriteUsd + cacheReadUsd, inputUsd, outputUsd, cacheWriteUsd, cacheReadUsd };
}

/** What the same request would have cost with no prompt caching: every prompt token at the base input price. */
export function estimateUncachedCost(usage: Usage, model: string): number | undefined {
  const price = priceOf(model);
  if (!price) return undefined;
  const prompt = promptTokens(usage);
  const rates = ratesFor(price, prompt);
  return (prompt * rates.input + usage.outputTokens * rates.output) / PER_MILLION;
}

/** Every prompt token of a request, however it was billed. */
export function promptTokens(usage: Usage): number {
  return usage.inputTokens + usage.cacheWriteTokens + usage.cacheReadTokens;
}

function ratesFor(price: ModelPrice, prompt: number): Rates {
  return price.longPrompt && prompt > price.longPrompt.overTokens ? price.longPrompt.rates : price;
}

/**
 * A sum of estimates in whole nanodollars, which it is: every rate in MODEL_PRICES is a whole number of
 * thousandths of a dollar per MTok (test/llm/cost.test.ts), so a token costs a whole number of them.
 * Summed as floats the last digits depend on the order: a run of 412 steps at $0.00008 came to $0.03296
 * record by record (a fork, a retry, `show`) and to $0.032959999999999996 from its block summaries' sums
 * and the records after them (a worker, GET /runs/:id), so at a budget of $0.03296 its worker asked for
 * step 413 where a fork or a retry found the budget reached.
 */
export function wholeNanos(usd: number): number {
  return Math.round(usd * 1e9) / 1e9;
}

/** A dollar figure for people: cents precision above a dollar, more digits below. */
export function formatUsd(usd: number): string {
  return usd >= 1 ? `$${usd.toFixed(2)}` : `$${usd.toFixed(4)}`;
}

/**
 * The model that answered a run most recently: the last step's that names one, else its wait's (the
 * call that began the wait carries no step yet). The usage no step carries (the DONE reply, unusable
 * replies) came from it, so it prices that usage, as the budget does (lib/engine/budget.ts).
 */
export function lastModelOf(run: { steps: readonly { model?: string }[]; wait?: { model?: string } } & HeldBlocks): string | undefined {
  return run.steps.findLast((s) => s.model)?.model ?? unheldBlocks(run).findLast((b) => b.cost?.model)?.cost?.model ?? run.wait?.model;
}

/** A run's condensed blocks, for a state from a bounded load: those it does not hold count from their summaries. */
interface HeldBlocks { stepsFrom?: number; condensed?: readonly CondensedBlock[] }

/**
 * A stored block's cost as this code prices it, or undefined where its summary's cannot stand: written
 * without one (before summary format 2), or naming a model it found no price for that this code's table
 * has (a model added since the block was condensed). Taken as said, such a block stopped a run with a
 * dollar budget as unpriced at every step, while a retry, which reads every record, found it priced.
 */
export function summaryCost(block: CondensedBlock): BlockCost | undefined {
  return block.cost?.unpriced?.some((model) => priceOf(model)) ? undefined : block.cost;
}

/** Whether a dollar figure of `state` can be exact: every block it does not hold says its cost, as this code prices it. */
export function unheldBlocksPriced(state: HeldBlocks): boolean {
  return unheldBlocks(state).every((b) => summaryCost(b));
}

/** The usage of the records a summary stands for, taken from what is left to price. */
function subtractUsage(rest: Usage, usage: Usage): void {
  rest.inputTokens -= usage.inputTokens;
  rest.outputTokens -= usage.outputTokens;
  rest.cacheWriteTokens -= usage.cacheWriteTokens;
  rest.cacheReadTokens -= usage.cacheReadTokens;
}

/**
 * What a block of step records cost, for its stored summary (lib/core/condensed.ts), each record priced by
 * the model that chose it, as runCost prices it: undefined when a record with usage names no model (the
 * price of such a record depends on the reader's fallback model). Priced at today's table when the block is
 * condensed: a run holding the block's records prices them again at the table of the code that reads them.
 */
export function blockCost(records: readonly { usage?: Usage; model?: string }[]): BlockCost | undefined {
  let usd = 0;
  let uncachedUsd = 0;
  let priced = false;
  const unpriced: string[] = [];
  for (const record of records) {
    if (!record.usage) continue;
    if (record.model === undefined) return undefined;
    const cost = estimateCost(record.usage, record.model);
    const uncached = estimateUncachedCost(record.usage, record.model);
    if (cost && uncached !== undefined) { usd += cost.usd; uncachedUsd += uncached; priced = true; }
    else if (promptTokens(record.usage) + record.usage.outputTokens > 0 && !unpriced.includes(record.model)) unpriced.push(record.model);
  }
  const cost: BlockCost = { usd, uncachedUsd };
  if (unpriced.length) cost.unpriced = unpriced;
  if (priced) cost.priced = true;
  const model = records.findLast((r) => r.model)?.model;
  if (model !== undefined) cost.model = model;
  return cost;
}

/**
 * A run's estimated cost: each step priced by the model that chose it, and the usage no step carries
 * (the DONE reply, unusable replies) by the model that answered last, `fallbackModel` if none is known.
 * Priced by `fallbackModel` alone, `status` showed a run of Sonnet steps with its DONE reply at the
 * default model's price, where `show --json` and the budget priced it at Sonnet's. Parts of unknown models
 * count as zero and are named in `unpriced`, so a view says the figure is short rather than showing $0 or a
 * part as the whole; `priced` says whether anything could be priced (not so for an offline run's no usage).
 */
export function runCost(
  run: { usage: Usage; steps: { usage?: Usage; model?: string }[]; wait?: { model?: string } } & HeldBlocks,
  fallbackModel: string,
): RunCost {
  let usd = 0;
  let uncachedUsd = 0;
  let priced = false;
  const unpriced: string[] = [];
  const rest: Usage = { ...run.usage };
  const add = (usage: Usage, model: string) => {
    const cost = estimateCost(usage, model);
    const uncached = estimateUncachedCost(usage, model);
    if (cost && uncached !== undefined) { usd += cost.usd; uncachedUsd += uncached; priced = true; }
    else if (promptTokens(usage) + usage.outputTokens > 0 && !unpriced.includes(model)) unpriced.push(model);
  };
  // A block the state does not hold counts at its summary's cost. One without (written by older code, or
  // short of a price this code knows) stays in the rest, priced by the last model: `approximate` says so.
  for (const block of unheldBlocks(run)) {
    const cost = summaryCost(block);
    if (!cost) continue;
    usd += cost.usd;
    uncachedUsd += cost.uncachedUsd;
    if (cost.priced) priced = true;
    for (const model of cost.unpriced ?? []) if (!unpriced.includes(model)) unpriced.push(model);
    subtractUsage(rest, block.usage);
  }
  for (const step of run.steps) {
    if (!step.usage) continue;
    add(step.usage, step.model ?? fallbackModel);
    subtractUsage(rest, step.usage);
  }
  if (promptTokens(rest) + rest.outputTokens > 0) add(rest, lastModelOf(run) ?? fallbackModel);
  const prompt = promptTokens(run.usage);
  return { usd: wholeNanos(usd), uncachedUsd: wholeNanos(uncachedUsd), priced, unpriced, cacheHitShare: prompt ? run.usage.cacheReadTokens / prompt : 0, approximate: !unheldBlocksPriced(run) };
}

export interface RunCost {
  usd: number;
  uncachedUsd: number;
  priced: boolean;
  /** The models of usage with no known price ('' for usage of no model known at all), left out of `usd`. */
  unpriced: string[];
  cacheHitShare: number;
  /**
   * Some earlier steps of a state from a bounded load were priced by the model that answered last: their
   * summary, written before summaries carried a cost, does not say what each cost.
   */
  approximate: boolean;
}

/**
 * A run's estimated cost for people: the figure, or, when some usage has no known price, what could be
 * priced as a lower bound and which models were not; never $0 for usage that was not priced.
 */
export function costText(cost: Pick<RunCost, 'usd' | 'priced' | 'unpriced'>): string {
  if (!cost.unpriced.length) return formatUsd(cost.usd);
  const models = `no price known for ${cost.unpriced.map((m) => m || 'an unnamed model').join(', ')}`;
  return cost.priced ? `at least ${formatUsd(cost.usd)} (${models})` : models;
}

/** A step's estimated cost for people, '' for a step with no usage, and 'no price' for an unknown model. */
export function stepCostText(usage: Usage | undefined, model: string): string {
  if (!usage) return '';
  const cost = estimateCost(usage, model);
  return cost ? formatUsd(cost.usd) : 'no price';
}

/**
 * A run's estimated cost so far for its budget: like runCost, but undefined when any usage cannot be
 * priced (a model with no known price, or usage no step carries and no fallback model), since a budget
 * must not count what it cannot price as free.
 */
export function estimateRunUsd(
  run: { usage: Usage; steps: { usage?: Usage; model?: string }[] } & HeldBlocks,
  fallbackModel: string | undefined,
): number | undefined {
  let usd = 0;
  const rest: Usage = { ...run.usage };
  // A block the state does not hold counts at its summary's cost; the engine reads the records of a block
  // whose summary has none (lib/engine/advance.ts), so here such a block stays in the rest.
  for (const block of unheldBlocks(run)) {
    const cost = summaryCost(block);
    if (!cost) continue;
    if (cost.unpriced) return undefined;
    usd += cost.usd;
    subtractUsage(rest, block.usage);
  }
  for (const step of run.steps) {
    if (!step.usage) continue;
    const model = step.model ?? fallbackModel;
    const cost = model === undefined ? undefined : estimateCost(step.usage, model);
    if (!cost) return undefined;
    usd += cost.usd;
    subtractUsage(rest, step.usage);
  }
  if (promptTokens(rest) + rest.outputTokens > 0) {
    const cost = fallbackModel === undefined ? undefined : estimateCost(rest, fallbackModel);
    if (!cost) return undefined;
    usd += cost.usd;
  }
  return wholeNanos(usd);
}
