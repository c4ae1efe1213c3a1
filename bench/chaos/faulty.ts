/**
 * Port wrappers through which a chaos schedule injects faults: a process that died (every call fails from
 * then on, as nothing of a killed process reaches the store), and a store brownout (calls fail as a
 * locked or throttled store's do, for a while, for every process alike).
 */
export class ProcessDied extends Error {
  constructor(readonly workerId: string) { super(`worker ${workerId} is dead`); }
}

export class Brownout extends Error {
  constructor() { super('SQLITE_BUSY: database is locked (injected brownout)'); }
}

export interface FaultSwitch {
  /** Throws if the caller's process is dead or the store is browned out. */
  check(): void;
}

/** The same object, with every method call passing through `faults.check()` first. */
export function faulty<T extends object>(target: T, faults: FaultSwitch): T {
  return new Proxy(target, {
    get(t, property, receiver) {
      const value = Reflect.get(t, property, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        // Every wrapped method is async: a fault is a rejected promise, never a synchronous throw.
        try { faults.check(); } catch (error) { return Promise.reject(error); }
        return (value as (...a: unknown[]) => unknown).apply(t, args);
      };
    },
  });
}
