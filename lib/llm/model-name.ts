/**
 * Model names, apart from the Anthropic adapter so that what only needs a name (pricing in
 * `stepwise status`) does not load the SDK.
 */

/** The docs' recommended starting model ("start with Claude Opus 5.5 for most workloads"), built for long agentic runs. */
export const DEFAULT_MODEL = 'claude-opus-5-5';
export const MODEL_ENV = 'STEPWISE_MODEL';

/** The model to price usage by when a step did not record one: STEPWISE_MODEL, else the default. */
export function pricingModel(env: NodeJS.ProcessEnv = process.env): string {
  return env[MODEL_ENV]?.trim() || DEFAULT_MODEL;
}
