/** What agent modules and embedding code import from stepwise. */
export { defineAgent, loadAgent, tool } from './agent.ts';
export type { AgentDefinition, AgentSettings, ToolContext, ToolDefinition } from './agent.ts';
export { PermanentError, ToolError, TransientError } from './core/errors.ts';
export type { Budget, ForkedFrom, RunState, RunStatus, StepRecord, Usage } from './core/state.ts';
export { advance } from './engine/advance.ts';
export { handleDelivery } from './engine/handle-message.ts';
export { startRun } from './engine/start.ts';
export { cancelRun } from './engine/operate/cancel.ts';
export { forkRun } from './engine/operate/fork.ts';
export { retryRun } from './engine/operate/retry.ts';
export { showRun } from './engine/operate/show.ts';
export { runWorker } from './engine/worker-loop.ts';
export { openLocalRuntime } from './local/runtime.ts';
export type { Model, ModelReply, ModelRequest } from './ports.ts';
export { requestApproval, sleepUntil, waitForEvent } from './waits/tools.ts';
export type { ApprovalToolOptions, EventToolOptions, SleepToolOptions } from './waits/tools.ts';
export type { EventTrigger, IncomingEvent, WaitAnswer } from './core/waits.ts';
