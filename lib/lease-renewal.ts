import { renewEveryMs } from './core/lease.ts';
import { everyOn, type Clock } from './ports.ts';

/** Thrown into an effect's signal when its claim was found to belong to another attempt. */
export class ClaimLostError extends Error {
  constructor(readonly key: string) {
    super(`the claim on idempotency key ${key} was lost: the lease ran out and another attempt took the key`);
    this.name = 'ClaimLostError';
  }
}

/**
 * Runs a ledger's effect while a timer renews its claim every third of the lease, so the claim lives as
 * long as this process does (like a queue message's heartbeat). `renew` answers false when the claim is
 * no longer ours: then the effect's signal aborts and renewing stops. A renewal that fails for another
 * reason (a throttle, a locked file) is simply tried again at the next tick.
 */
export async function holdWhileRenewing<T>(input: {
  key: string;
  clock: Clock;
  leaseMs: number;
  renew: () => Promise<boolean> | boolean;
  effect: (signal: AbortSignal) => Promise<T>;
}): Promise<T> {
  const lost = new AbortController();
  let inFlight = false;
  const settle = (ours: boolean) => {
    if (ours || lost.signal.aborted) return;
    stop();
    lost.abort(new ClaimLostError(input.key));
  };
  const stop = everyOn(input.clock, renewEveryMs(input.leaseMs), () => {
    // One renewal at a time: a slow write is not piled on by the next tick.
    if (lost.signal.aborted || inFlight) return undefined;
    let answer: Promise<boolean> | boolean;
    try {
      answer = input.renew();
    } catch {
      return undefined;
    }
    if (typeof answer === 'boolean') return settle(answer);
    inFlight = true;
    return answer.then(settle, () => undefined).finally(() => { inFlight = false; });
  });
  try {
    return await input.effect(lost.signal);
  } finally {
    stop();
  }
}
