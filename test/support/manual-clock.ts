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
 * early nor holds it back.
 */
export class ManualClock implements Clock {
  private readonly line: Timeline;
  private state: 'running' | 'frozen' | 'killed' = 'running';
  /** How far this process's wall clock is off the line's (skew). */
  private offset = 0;

  constructor(ms = 1_700_000_000_000, line?: Timeline) {
    this.line = line ?? { ms, timers: new Set() };
  }

  get ms(): number { return this.line.ms; }
  set ms(value: number) { this.line.ms = value; }

  now = (): number => this.line.ms + this.offset;

  /**
   * This process's wall clock moves `ms` off the line's (ahead, or behind if negative) and stays there: a
   * machine of its own whose clock was stepped or drifted, where `ms` steps every process of the line.
   */
  skew(ms: number): this {
    this.offset += ms;
    return this;
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
    const timer: Timer = { everyMs: ms, due: this.tick + ms, fn, owner: this };
    if (this.state !== 'killed') this.line.timers.add(timer);
    return () => { this.line.timers.delete(timer); };
  };

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
    this.line.ms += passed;
  }

  private fire(timer: Timer): unknown {
    this.elapse(timer.due);
    timer.due += timer.everyMs;
    return timer.fn();
  }
}
