import type { ToolDefinition } from '../agent.ts';
import { ToolTimeoutError } from '../core/errors.ts';
import { joinedSignal } from '../joined-signal.ts';
import { DEFAULT_TOOL_TIMEOUT_MS } from '../settings.ts';

/**
 * One try of a step's tool, held to its time limit (`timeoutMs`, DEFAULT_TOOL_TIMEOUT_MS) and to the
 * worker's own deadline (a Lambda's remaining time). A tool that returns a value, not a promise, is done
 * before any limit could matter: no timer is armed and no signal made on that path, which every read-only
 * no-op step takes. One that returns a promise races a timer; at the limit its `ctx.signal` aborts and the
 * try fails with ToolTimeoutError, whether or not the tool stops (JavaScript cannot stop it).
 */
export class ToolTime {
  private controller: AbortController | undefined;
  private ended: ToolTimeoutError | undefined;

  constructor(private readonly tool: ToolDefinition, private readonly worker?: AbortSignal) {}

  /** `ctx.signal`: made when first asked for, aborted at the limit (already aborted if asked for after). */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.ended) this.controller.abort(this.ended);
    }
    return this.controller.signal;
  }

  run(call: () => unknown): unknown {
    // Past the worker's deadline already (a recorded decision resumed late, or the deadline came with the
    // model's reply): the tool is not started only to be abandoned.
    if (this.worker?.aborted) throw this.end(this.pastWorkerDeadline());
    const result = call();
    return isPromiseLike(result) ? this.race(result) : result;
  }

  /**
   * The signal `once` holds its claim under: the try's, and the caller's own if it gave one; `release` when
   * the once has ended, so a signal the program keeps for its life keeps nothing of the step (joinedSignal).
   */
  onceSignal(own: AbortSignal | undefined): { signal: AbortSignal; release(): void } {
    return own ? joinedSignal(own, this.signal) : { signal: this.signal, release: () => undefined };
  }

  private end(error: ToolTimeoutError): ToolTimeoutError {
    this.ended = error;
    this.controller?.abort(error);
    return error;
  }

  private pastWorkerDeadline(): ToolTimeoutError {
    return new ToolTimeoutError(`tool ${this.tool.name} had not finished when the worker's own deadline came`);
  }

  private race(result: PromiseLike<unknown>): Promise<unknown> {
    const ms = this.tool.timeoutMs ?? DEFAULT_TOOL_TIMEOUT_MS;
    const worker = this.worker;
    return new Promise((resolve, reject) => {
      const settle = () => {
        clearTimeout(timer);
        worker?.removeEventListener('abort', onWorkerDeadline);
      };
      const end = (error: ToolTimeoutError) => {
        settle();
        reject(this.end(error));
      };
      const onWorkerDeadline = () => end(this.pastWorkerDeadline());
      const timer = setTimeout(() => end(new ToolTimeoutError(`tool ${this.tool.name} did not finish within ${describeMs(ms)} (its timeoutMs)`)), ms);
      if (worker?.aborted) onWorkerDeadline();
      else worker?.addEventListener('abort', onWorkerDeadline, { once: true });
      Promise.resolve(result).then((value) => { settle(); resolve(value); }, (error: unknown) => { settle(); reject(error); });
    });
  }
}

export function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}

function describeMs(ms: number): string {
  if (ms < 1000) return `${ms} ms`;
  const seconds = ms / 1000;
  return seconds < 120 ? `${Number(seconds.toFixed(1))} s` : `${Number((seconds / 60).toFixed(1))} min`;
}
