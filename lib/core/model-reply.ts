import type { Usage } from './state.ts';

/**
 * Why a model's reply is not a ModelReply the engine can record, or undefined. The engine takes any Model,
 * including one in plain JavaScript, where no type checks it: a usage without its cache counts would be
 * stored as null and make every later checkpoint of the run unreadable. Hand-written, not a zod parse:
 * this runs at every step.
 */
export function replyProblem(reply: unknown): string | undefined {
  if (!reply || typeof reply !== 'object') return `the reply is ${reply === null ? 'null' : typeof reply}, not an object`;
  const r = reply as Record<string, unknown>;
  switch (r.kind) {
    case 'tool':
      if (typeof r.tool !== 'string') return 'a tool reply needs tool: string';
      break;
    case 'done':
      if (typeof r.summary !== 'string') return 'a done reply needs summary: string';
      break;
    case 'invalid':
      if (typeof r.reason !== 'string') return 'an invalid reply needs reason: string';
      break;
    default:
      return `kind must be "tool", "done" or "invalid", got ${String(JSON.stringify(r.kind))}`;
  }
  if (r.model !== undefined && typeof r.model !== 'string') return 'model must be a string when given';
  return r.usage === undefined ? undefined : usageProblem(r.usage);
}

function usageProblem(given: unknown): string | undefined {
  if (!given || typeof given !== 'object') return 'usage must be an object when given';
  const usage = given as Record<string, unknown>;
  for (const field of USAGE_FIELDS) {
    const value = usage[field];
    if (!Number.isInteger(value) || (value as number) < 0) return `usage.${field} must be a whole number from 0, got ${String(JSON.stringify(value))}`;
  }
  if (Object.keys(usage).length !== USAGE_FIELDS.length) return `usage has fields other than ${USAGE_FIELDS.join(', ')}`;
  return undefined;
}

/**
 * The usage of a reply the engine cannot record otherwise (no kind, a tool that is no string), when that
 * usage itself is whole: the call was made and billed, and the README counts a discarded reply's tokens.
 */
export function readableUsage(reply: unknown): Usage | undefined {
  const usage = reply && typeof reply === 'object' ? (reply as { usage?: unknown }).usage : undefined;
  if (usage === undefined || usageProblem(usage) !== undefined) return undefined;
  const { cacheReadTokens, cacheWriteTokens, inputTokens, outputTokens } = usage as Usage;
  return { cacheReadTokens, cacheWriteTokens, inputTokens, outputTokens };
}

const USAGE_FIELDS = ['inputTokens', 'outputTokens', 'cacheWriteTokens', 'cacheReadTokens'] as const;
