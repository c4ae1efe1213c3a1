import type { Clock } from '../ports.ts';

/** Refusals an address may have in one window before its next refused requests are answered 429. */
export const THROTTLE_REFUSALS = 10;
/** The window those refusals are counted in, and how long the throttle then holds. */
export const THROTTLE_WINDOW_MS = 60_000;
/** The most addresses tracked at once: about 100 bytes each, so about 1 MB at most. */
export const THROTTLE_ADDRESSES = 10_000;

interface Window {
  start: number;
  refusals: number;
}

/**
 * Refused authentication per client address, for `stepwise serve`: past `limit` refusals in a window, the
 * address's further refused requests are answered 429 with Retry-After until the window ends. Only requests
 * that fail authentication are counted or held back, never one with the right token: behind a proxy every
 * client has the proxy's address, and a throttle on all its requests would let one client with a wrong token
 * lock every other one out (as Grafana's login lockout does per user). So it does not slow a guesser who reads
 * 429 as "wrong" (the token's length does: serve's own is 192 random bits, STEPWISE_API_TOKEN at least 16
 * characters); it tells a client stuck on a wrong token to stop, as nginx's limit_req would, and puts a flood
 * in the log as one line a minute (refusal-log.ts), for fail2ban or a person to act on.
 *
 * On AWS the app runs in many Lambda instances, each of which would count a part of an address's refusals:
 * there the stage's throttle (the construct's apiThrottle) bounds them, and IAM refuses at the gateway.
 */
export class AuthThrottle {
  private readonly windows = new Map<string, Window>();
  private readonly limit: number;
  private readonly windowMs: number;
  private readonly maxAddresses: number;

  constructor(private readonly clock: Pick<Clock, 'now'>, options: { limit?: number; windowMs?: number; maxAddresses?: number } = {}) {
    this.limit = options.limit ?? THROTTLE_REFUSALS;
    this.windowMs = options.windowMs ?? THROTTLE_WINDOW_MS;
    this.maxAddresses = options.maxAddresses ?? THROTTLE_ADDRESSES;
  }

  /**
   * Counts a refused request from `address`: the seconds to give in Retry-After when it is over the limit
   * (the request is then answered 429), else undefined. An unknown address is not held back: it cannot be told apart.
   */
  refused(address: string | undefined): number | undefined {
    if (address === undefined) return undefined;
    const now = this.clock.now();
    let window = this.windows.get(address);
    if (!window || now >= window.start + this.windowMs) {
      // A new window goes to the end of the map's order: the oldest window is the first key.
      this.windows.delete(address);
      if (this.windows.size >= this.maxAddresses) this.dropOldest(now);
      window = { start: now, refusals: 0 };
      this.windows.set(address, window);
    }
    window.refusals++;
    if (window.refusals <= this.limit) return undefined;
    return Math.max(1, Math.ceil((window.start + this.windowMs - now) / 1000));
  }

  /** How many addresses are tracked. */
  get size(): number {
    return this.windows.size;
  }

  /** Windows that have ended go first; if none has, the oldest one. */
  private dropOldest(now: number): void {
    for (const [address, window] of this.windows) {
      if (now < window.start + this.windowMs) break;
      this.windows.delete(address);
    }
    if (this.windows.size >= this.maxAddresses) this.windows.delete(this.windows.keys().next().value!);
  }
}
