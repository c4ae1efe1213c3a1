import type { AnswerDeps } from '../../waits/answer.ts';

/**
 * What operating a run by hand needs (the CLI, the HTTP API): the engine's ports, no model, no agent;
 * the same as answering a wait.
 */
export type OperateDeps = AnswerDeps;
