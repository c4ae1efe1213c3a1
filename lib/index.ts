/**
 * What agent modules and embedding code import from `stepwise`: defining agents and tools, the wait
 * tools, the errors, the engine. Light on purpose (no SDK, no database driver): an agent module imports
 * it in every worker. The runtimes are `stepwise/local` and `stepwise/aws`; the CDK construct is
 * `stepwise/cdk`. Anything not exported from these entry points is internal.
 */
export { defineAgent, loadAgent, tool } from './agent.ts';
export type { AgentDefinition, AgentSettings, ToolApproval, ToolContext, ToolDefinition } from './agent.ts';
export {
  IdempotencyKeyReuseError, InvalidInputError, ModelUnavailableError, PermanentError, StepwiseError, ToolError, ToolTimeoutError, TransientError,
} from './core/errors.ts';
// What the engine's calls throw, for a program to tell apart (an unknown run from another agent's, a run
// newer code wrote); ModelKeyError is what a Model of one's own throws when its key is refused.
export {
  EffectStillRunningError, ModelKeyError, NewerFormatError, NoSuchStepError, RunIdInUseError, RunIdTakenError, RunStateError, UnknownRunError, UnreadableCheckpointError, WrongAgentError,
} from './core/errors.ts';
export type { Budget, ForkedFrom, RunState, RunStatus, StepRecord, Usage } from './core/state.ts';
export { advance } from './engine/advance.ts';
export type { Advance, AdvanceOptions } from './engine/advance.ts';
export { handleDelivery } from './engine/handle-message.ts';
export type { Handled } from './engine/handle-message.ts';
export { startRun } from './engine/start.ts';
export type { StartResult } from './engine/start.ts';
export { cancelRun } from './engine/operate/cancel.ts';
export type { CancelInput, CancelOutcome } from './engine/operate/cancel.ts';
export { forkRun } from './engine/operate/fork.ts';
export type { ForkInput, ForkResult } from './engine/operate/fork.ts';
export { retryRun } from './engine/operate/retry.ts';
export type { RetryInput, RetryResult } from './engine/operate/retry.ts';
export { showRun } from './engine/operate/show.ts';
export type { RunView, ShowOptions, StepView } from './engine/operate/show.ts';
export { runWorker } from './engine/worker-loop.ts';
export type { WorkerOptions } from './engine/worker-loop.ts';
export type { EngineDeps } from './engine/deps.ts';
// What EngineDeps and runWorker take, for a program that wraps or brings its own queue, clock or model.
export type { Clock, Delivery, Model, ModelReply, ModelRequest, RunMessage, RunQueue, RunQueueConsumer } from './ports.ts';
export { requestApproval, sleepUntil, waitForEvent } from './waits/tools.ts';
export { readOutput } from './tools/read-output.ts';
export type { ReadOutputToolOptions } from './tools/read-output.ts';
export type { ApprovalToolOptions, EventToolOptions, SleepToolOptions } from './waits/tools.ts';
export type { EventTrigger, IncomingEvent, WaitAnswer } from './core/waits.ts';
export type { AnswerOutcome } from './waits/answer.ts';
