/**
 * The long polls of GET /runs/:id (`?after=&waitSeconds=`) one client address holds at once, for `stepwise
 * serve`: each holds a connection for up to MAX_RUN_WAIT_SECONDS, so an address's long polls are held to a
 * share of its connections (a quarter of --max-connections-per-address), and its other requests still have
 * places. Past it, a long poll is answered 429 at once with Retry-After; one that asks without waiting is not
 * counted. On AWS each Lambda instance answers one request at a time: API Gateway's throttle bounds them there.
 */
export class LongPolls {
  private readonly held = new Map<string, number>();

  constructor(readonly perAddress: number) {}

  /** A place for a long poll from `address`: the call that gives it back, or undefined when the address holds them all. */
  take(address: string | undefined): (() => void) | undefined {
    // An address that cannot be told (no socket) is not held back: it cannot be told apart.
    if (address === undefined) return () => undefined;
    const count = this.held.get(address) ?? 0;
    if (count >= this.perAddress) return undefined;
    this.held.set(address, count + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const left = this.held.get(address)! - 1;
      if (left) this.held.set(address, left);
      else this.held.delete(address);
    };
  }

  /** How many long polls `address` holds. */
  holding(address: string): number {
    return this.held.get(address) ?? 0;
  }
}

/** An address's share of its connections that long polls may hold. */
export const longPollsPerAddress = (maxConnectionsPerAddress: number): number => Math.max(1, Math.floor(maxConnectionsPerAddress / 4));

/** Seconds a long poll refused for its address's cap is told to wait: its others answer within MAX_RUN_WAIT_SECONDS. */
export const LONG_POLL_RETRY_AFTER_S = 1;
