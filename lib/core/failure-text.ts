import { inspect } from 'node:util';
import { MAX_ERROR_CHARS } from './state.ts';

/** Causes followed: enough for a library's wrapper of a wrapper, bounded for a chain that loops. */
const MAX_CAUSES = 5;

/**
 * What a tool threw, for its run's lastError and reason. A tool may throw anything: an Error
 * whose message says nothing and whose cause says why (fetch's `fetch failed`, caused by `connect
 * ECONNREFUSED`), an Error with no message (`new AggregateError(errors)`), undefined, an object. Its
 * message alone left an operator `last error: ` or `last error: [object Object]` to go on.
 */
export function failureText(thrown: unknown): string {
  let text = ownText(thrown);
  const seen = new Set<unknown>([thrown]);
  let cause = causeOf(thrown);
  for (let i = 0; i < MAX_CAUSES && cause !== undefined && !seen.has(cause); i++) {
    seen.add(cause);
    const more = ownText(cause);
    // A wrapper that put its cause's message in its own (`copy failed: database unavailable`) says it once.
    if (!text.includes(more)) text = `${text}: ${more}`;
    cause = causeOf(cause);
  }
  // recordFailure keeps the start of a longer one.
  return text;
}

function ownText(value: unknown): string {
  try {
    return readText(value);
  } catch (error) {
    // An Error whose message is a getter that throws (a revoked Proxy's, a library's lazy one): the read
    // escaped the step, whose message was delivered again until its worker counted as crashing.
    return `${value instanceof Error ? 'an Error' : 'a value'} whose message could not be read (reading it threw ${safeText(error)}) was thrown`;
  }
}

function safeText(value: unknown): string {
  try {
    return value instanceof Error ? `${value.name}: ${value.message}` : inspect(value, { depth: 1, breakLength: Infinity, maxStringLength: 200 });
  } catch {
    return 'something unreadable';
  }
}

function readText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (!(value instanceof Error)) return `${inspect(value, { depth: 2, breakLength: Infinity, maxStringLength: MAX_ERROR_CHARS })} was thrown, not an Error`;
  const message = value.message || `${value.name || 'Error'} (no message)`;
  // Promise.any's and the like: the errors it gathers are what went wrong.
  const errors = value instanceof AggregateError && Array.isArray(value.errors) ? value.errors : [];
  return errors.length ? `${message}: ${errors.map(ownText).join('; ')}` : message;
}

function causeOf(value: unknown): unknown {
  try {
    return value instanceof Error ? value.cause : undefined;
  } catch {
    return undefined;
  }
}
