import type { Logger } from '../../log.ts';
import type { BlobStore, CheckpointStore, Clock, RunQueue } from '../../ports.ts';

/** What operating a run by hand needs (the CLI, the HTTP API): the engine's ports, no model, no agent. */
export interface OperateDeps {
  store: CheckpointStore;
  blobs: BlobStore;
  queue: RunQueue;
  clock: Clock;
  /** Who writes the checkpoints: `cli-<host>-<pid>`, `api`, a Lambda request id. */
  workerId: string;
  codeVersion: string;
  log: Logger;
}
