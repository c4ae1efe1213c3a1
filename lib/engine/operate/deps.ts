import type { Notifier } from '../../ports.ts';
import type { AnswerDeps } from '../../waits/answer.ts';

/**
 * What operating a run by hand needs (the CLI, the HTTP API): the engine's ports, no model, no agent;
 * the same as answering a wait, and the notifier whose kept emails a delete deletes.
 */
export type OperateDeps = AnswerDeps & { notifier?: Notifier };
