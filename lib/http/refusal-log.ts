import type { Logger } from '../log.ts';
import { everyOn, type Clock } from '../ports.ts';

/** Why a request did not authenticate. Never the token or the link's signature. */
export type RefusalReason = 'missing' | 'wrong' | 'forged' | 'expired' | 'malformed';

export interface Refusal<R extends string = RefusalReason> {
  address: string | undefined;
  /** The request's method and path (an approval link's token masked); none for a connection refused before its request. */
  method?: string;
  route?: string;
  reason: R;
  /** Answered 429 by the throttle (auth-throttle.ts). */
  throttled?: boolean;
  /** The run of an expired link, whose claim was signed by this deployment and so can be believed. */
  runId?: string;
}

/**
 * A line a minute per address at most: enough to see a guesser, a scanner or a client with a stale token, and
 * how hard each is trying, while one that retries in a loop (thousands a second) writes a line a minute, not
 * thousands, and a collector billed by the byte is not flooded for it.
 */
export const REFUSAL_LOG_INTERVAL_MS = 60_000;
/**
 * The most addresses with a line of their own in an interval; past them, refusals from new addresses are
 * counted together under `address: "others"`, so a flood from many addresses (an IPv6 /64 has 2^64) writes
 * at most this many lines more an interval.
 */
export const REFUSAL_LOG_ADDRESSES = 256;
const OTHERS = 'others';

/** What a kind of refusal's lines say: their event, and their message for one refusal and for several. */
export interface RefusalLine {
  event: string;
  one: string;
  many: (count: number) => string;
}

const AUTH_LINE: RefusalLine = {
  event: 'auth-refused', one: 'request refused: not authenticated', many: (n) => `${n} requests refused: not authenticated`,
};

interface Tally<R extends string> {
  /** When this address's last line was written. */
  lastLine: number;
  /** Refusals since that line, not yet written. */
  pending: number;
  throttled: number;
  reasons: Partial<Record<R, number>>;
  last?: Refusal<R>;
}

/**
 * The `auth-refused` warn lines (or another kind's, `line`: serve's refused connections): an address's first
 * refusal at once, then its refusals of the next interval counted and written as one line at its end (by a
 * timer on the clock, so a flood that stops is still told).
 */
export class RefusalLog<R extends string = RefusalReason> {
  private readonly tallies = new Map<string, Tally<R>>();
  private stopTimer: (() => void) | undefined;
  private readonly intervalMs: number;
  private readonly maxAddresses: number;
  private readonly line: RefusalLine;

  constructor(private readonly log: Logger, private readonly clock: Clock, options: { intervalMs?: number; maxAddresses?: number; line?: RefusalLine } = {}) {
    this.intervalMs = options.intervalMs ?? REFUSAL_LOG_INTERVAL_MS;
    this.maxAddresses = options.maxAddresses ?? REFUSAL_LOG_ADDRESSES;
    this.line = options.line ?? AUTH_LINE;
  }

  refused(refusal: Refusal<R>): void {
    const now = this.clock.now();
    let key = refusal.address ?? 'unknown';
    let tally = this.tallies.get(key);
    if (!tally) {
      if (this.tallies.size >= this.maxAddresses) this.flushDue(now);
      if (this.tallies.size >= this.maxAddresses) key = OTHERS;
      tally = this.tallies.get(key);
    }
    if (!tally) {
      tally = { lastLine: -Infinity, pending: 0, throttled: 0, reasons: {} };
      this.tallies.set(key, tally);
    }
    this.count(tally, refusal);
    if (now >= tally.lastLine + this.intervalMs) this.write(key, tally, now);
    else this.stopTimer ??= everyOn(this.clock, this.intervalMs, () => this.flushDue(this.clock.now()));
  }

  /** Writes what is counted and not yet written (serve stopping). */
  close(): void {
    for (const [key, tally] of this.tallies) if (tally.pending) this.write(key, tally, this.clock.now());
    this.tallies.clear();
    this.stopTimer?.();
    this.stopTimer = undefined;
  }

  /** Writes each tally whose interval has passed; forgets those with nothing to write. */
  private flushDue(now: number): void {
    for (const [key, tally] of this.tallies) {
      if (now < tally.lastLine + this.intervalMs) continue;
      if (tally.pending) this.write(key, tally, now);
      else this.tallies.delete(key);
    }
    if (![...this.tallies.values()].some((t) => t.pending)) {
      this.stopTimer?.();
      this.stopTimer = undefined;
    }
  }

  private count(tally: Tally<R>, refusal: Refusal<R>): void {
    tally.pending++;
    if (refusal.throttled) tally.throttled++;
    tally.reasons[refusal.reason] = (tally.reasons[refusal.reason] ?? 0) + 1;
    tally.last = refusal;
  }

  private write(key: string, tally: Tally<R>, now: number): void {
    const last = tally.last!;
    this.log.warn({
      event: this.line.event, address: key,
      ...(last.method !== undefined ? { method: last.method, route: last.route } : {}), reason: last.reason,
      ...(last.runId !== undefined ? { runId: last.runId } : {}),
      // Since this address's last line: how many, why, and how many the throttle answered.
      refused: tally.pending,
      ...(tally.pending > 1 ? { reasons: tally.reasons } : {}),
      ...(tally.throttled ? { throttled: tally.throttled } : {}),
    }, tally.pending > 1 ? this.line.many(tally.pending) : this.line.one);
    tally.lastLine = now;
    tally.pending = 0;
    tally.throttled = 0;
    tally.reasons = {};
  }
}
