import { MODEL_ENV } from '../settings.ts';

export { MODEL_ENV };

/** The docs' recommended starting model ("start with Claude Opus 5.5 for most workloads"), built for long agentic runs. */
export const DEFAULT_MODEL = 'claude-opus-5-5';

/**
 * The model id runs use when the agent names none, and the one usage no step recorded is priced by: STEPWISE_MODEL, else DEFAULT_MODEL. Here, apart from
 * the SDK adapter, so what only prices usage (the API, the CLI) does not load the SDK.
 */
export function defaultModelId(env: NodeJS.ProcessEnv = process.env): string {
  return env[MODEL_ENV]?.trim() || DEFAULT_MODEL;
}
