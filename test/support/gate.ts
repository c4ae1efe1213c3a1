import type { Model, ModelReply, ModelRequest } from '../../lib/ports.ts';

export interface Gate {
  /** Waits until the test opens the gate; the first wait resolves `reached`. */
  wait(): Promise<void>;
  reached: Promise<void>;
  open(): void;
}

/** A point a test holds a worker at (inside a model call or a tool), then lets it go on by hand. */
export function gate(): Gate {
  let open!: () => void;
  let reach!: () => void;
  const opened = new Promise<void>((resolve) => { open = resolve; });
  const reached = new Promise<void>((resolve) => { reach = resolve; });
  return { wait: () => { reach(); return opened; }, reached, open };
}

/** A model that waits at a gate before answering its first request, as a slow or paused worker would. */
export function heldModel(inner: Model, at: Gate): Model {
  let first = true;
  return {
    name: inner.name,
    decide: async (request: ModelRequest): Promise<ModelReply> => {
      if (first) { first = false; await at.wait(); }
      return inner.decide(request);
    },
  };
}
