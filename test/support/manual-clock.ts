import type { MachineTime } from '../../lib/machine-time.ts';
import type { Clock } from '../../lib/ports.ts';

interface Timer {
  everyMs: number;
  due: number;
  fn: () => unknown;
  owner: ManualClock;
}

interface Timeline {
  ms: number;
  timers: Set<Timer>;
  /** Time that passed on the line (advance, pass), never moved by setting `ms`: every process's monotonic(). */
  passed: number;
  /** The timers of sleep() calls not yet woken, and who waits to hear of a new one (settle). */
  sleeps: Set<Timer>;
  onSleep: Set<() => void>;
  /** The machine's monotonic clock, once `onMachine()` gave the line one: it moves as time passes, never with `ms`. */
  machine?: MachineTime;
}

/**
 * A clock the test moves by hand: visibility timeouts, retry delays and leases pass instantly, and the
 * timers a process set on it (a ledger's lease renewal) fire at their due times as time passes.
 *
 * `process()` gives another worker "process" on the same time line, with timers of its own that
 * `freeze()` stops until `thaw()` (a SIGSTOP, a long GC pause) and `kill()` stops for good.
 *
 * Setting `ms` steps the wall clock (NTP, `date -s`); after `onMachine()` the line also has a machine's
 * monotonic clock (machine-time.ts), which only time passing (advance, pass) moves, and its timers are due
 * on that clock, as Node's are on the monotonic one: a step of the wall clock neither fires a renewal
 * early nor holds it back. `skew()` moves one process's wall clock alone (another machine's clock); its
 * timers, sleeps and monotonic() stay on the line's time, as a real process's are on its own monotonic clock.
 */
export class ManualClock implements Clock {
  private readonly line: Timeline;
  private state: 'running' | 'frozen' | 'killed' = 'running';

  /** How far this process's wall clock runs ahead of the line's (skew). */
  private aheadMs = 0;

  constructor(ms = 1_700_000_000_000, line?: Timeline) {
    this.line = line ?? { ms, timers: new Set(), passed: 0, sleeps: new Set(), onSleep: new Set() };
  }

  get ms(): number { return this.line.ms; }
  set ms(value: number) { this.line.ms = value; }

  now = (): number => this.line.ms + this.aheadMs;

  monotonic = (): number => this.line.passed;

  /**
   * This process's wall clock moves `ms` off where it was (ahead, or behind if negative) and stays there: a
   * machine of its own whose clock was stepped, where setting `ms` steps every process of the line.
   */
  skew(ms: number): this {
    this.aheadMs += ms;
    return this;
  }

  /** Wakes when the line's time reaches `ms` from now (advance, pass, settle), or at once when `signal` aborts. */
  sleep = (ms: number, signal?: AbortSignal): Promise<void> => {
    if (signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = () => {
        stop();
        this.line.sleeps.delete(timer);
        signal?.removeEventListener('abort', wake);
        resolve();
      };
      const timer = this.timer(ms, wake);
      const stop = () => { this.line.timers.delete(timer); };
      signal?.addEventListener('abort', wake, { once: true });
      if (!this.line.timers.has(timer)) return; // a killed process: it never wakes
      this.line.sleeps.add(timer);
      for (const listener of [...this.line.onSleep]) listener();
    });
  };

  /**
   * Awaits `promise`, passing the line's time whenever a running process sleeps meanwhile (a ledger that
   * watches a claim before taking it over), up to the moment the first sleeper wakes. `pass` moves the time:
   * a driver with its own duties on the way (a sweeper) gives its own.
   */
  async settle<T>(promise: Promise<T>, pass: (ms: number) => Promise<void> = (ms) => this.pass(ms)): Promise<T> {
    while (!(await this.asleep(promise))) {
      const next = this.nextSleep();
      if (next) await pass(Math.max(0, next.due - this.tick));
    }
    return promise;
  }

  /**
   * Whether `promise` settled (true) or, first, a running process of the line went to sleep (false; at
   * once if one sleeps already): a test sees a ledger wait before it moves the time on.
   */
  async asleep(promise: Promise<unknown>): Promise<boolean> {
    let settled = false;
    const done = promise.then(() => { settled = true; }, () => { settled = true; });
    let heard!: () => void;
    const sleeping = new Promise<void>((resolve) => { heard = resolve; });
    this.line.onSleep.add(heard);
    if (this.nextSleep()) heard();
    await Promise.race([done, sleeping]);
    this.line.onSleep.delete(heard);
    return settled;
  }

  machineTime = (): MachineTime | undefined => (this.line.machine ? { ...this.line.machine } : undefined);

  /** The time line gets a machine's monotonic clock, booted as `boot` (a new name is a reboot). */
  onMachine(boot = 'boot-1', ms = 1_000_000): this {
    // The timers set so far keep what they had left to wait, counted on the new clock.
    const shift = ms - this.tick;
    this.line.machine = { boot, ms };
    for (const timer of this.line.timers) timer.due += shift;
    return this;
  }

  /** What timers are due on: the machine's clock once the line has one, else the wall clock. */
  private get tick(): number {
    return this.line.machine ? this.line.machine.ms : this.line.ms;
  }

  every = (ms: number, fn: () => unknown): (() => void) => {
    const timer = this.timer(ms, fn);
    return () => { this.line.timers.delete(timer); };
  };

  private timer(ms: number, fn: () => unknown): Timer {
    const timer: Timer = { everyMs: ms, due: this.tick + ms, fn, owner: this };
    if (this.state !== 'killed') this.line.timers.add(timer);
    return timer;
  }

  /** Moves time forward, firing due timers in order; what a timer starts is not waited for. */
  advance(ms: number): void {
    const target = this.tick + ms;
    for (let timer = this.nextDue(target); timer; timer = this.nextDue(target)) this.fire(timer);
    this.elapse(target);
  }

  /** Moves time forward like advance(), waiting for what each timer starts (a renewal write) before going on. */
  async pass(ms: number): Promise<void> {
    const target = this.tick + ms;
    for (let timer = this.nextDue(target); timer; timer = this.nextDue(target)) await this.fire(timer);
    this.elapse(target);
  }

  /** Another worker process on the same time line. */
  process(): ManualClock {
    return new ManualClock(this.line.ms, this.line);
  }

  /** This process stops: its timers do not fire while time passes. */
  freeze(): void {
    if (this.state === 'running') this.state = 'frozen';
  }

  /** The process runs again: each overdue timer fires once at once, as Node's do after a SIGCONT. */
  async thaw(): Promise<void> {
    if (this.state !== 'frozen') return;
    this.state = 'running';
    const overdue = [...this.line.timers].filter((t) => t.owner === this && t.due <= this.tick);
    for (const timer of overdue) {
      timer.due = this.tick + timer.everyMs;
      await timer.fn();
    }
  }

  /** The process is dead: its timers never fire again. */
  kill(): void {
    this.state = 'killed';
    for (const timer of this.line.timers) if (timer.owner === this) this.line.timers.delete(timer);
    for (const timer of this.line.sleeps) if (timer.owner === this) this.line.sleeps.delete(timer);
  }

  /** The sleep that wakes first among those of running processes (a frozen one's waits for its thaw). */
  private nextSleep(): Timer | undefined {
    let next: Timer | undefined;
    for (const timer of this.line.sleeps) {
      if (timer.owner.state === 'running' && (!next || timer.due < next.due)) next = timer;
    }
    return next;
  }

  private nextDue(target: number): Timer | undefined {
    let next: Timer | undefined;
    for (const timer of this.line.timers) {
      if (timer.owner.state !== 'running' || timer.due > target) continue;
      if (!next || timer.due < next.due) next = timer;
    }
    return next;
  }

  /** Time passes up to `target` (on the timers' clock): the wall clock moves by as much. */
  private elapse(target: number): void {
    const passed = target - this.tick;
    if (passed <= 0) return;
    if (this.line.machine) this.line.machine.ms += passed;
    this.line.passed += passed;
    this.line.ms += passed;
  }

  private fire(timer: Timer): unknown {
    this.elapse(timer.due);
    timer.due += timer.everyMs;
    return timer.fn();
  }
}
