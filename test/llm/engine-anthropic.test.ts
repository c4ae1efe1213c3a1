import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { stepLine } from '../../lib/core/prompt.ts';
import { MAX_MODEL_UNAVAILABLE_FAILURES, ZERO_USAGE, addUsage, type Usage } from '../../lib/core/state.ts';
import { advance } from '../../lib/engine/advance.ts';
import { handleDelivery } from '../../lib/engine/handle-message.ts';
import { progressLine } from '../../lib/cli/progress.ts';
import { AnthropicModel } from '../../lib/llm/anthropic.ts';
import { createLogger } from '../../lib/log.ts';
import { FakeRows, rowsAgent } from '../support/fake-tool.ts';
import { ManualClock, SimulatedCrash, VISIBILITY_MS, drain, loadState, start, tempDb, workerProcess } from '../support/harness.ts';
import {
  apiError, completedStepLines, done, startMessagesServer, toolUse, toolUses, type MessagesServer, type RecordedRequest, type Reply,
} from '../support/messages-server.ts';

/** Answers from the prompt alone, as a real model resumed on another worker would: write rows 1..total, then DONE. */
function writeRows(total: number) {
  return (request: RecordedRequest): Reply => {
    const completed = completedStepLines(request.userText).length;
    return completed < total ? toolUse('write_row', { row: completed + 1 }) : done(`Wrote ${total} rows, one per step.`);
  };
}

function reportedUsage(requests: RecordedRequest[]): Usage {
  return requests.reduce((sum, r) => addUsage(sum, r.usage && {
    inputTokens: r.usage.input_tokens, outputTokens: r.usage.output_tokens,
    cacheWriteTokens: r.usage.cache_creation_input_tokens, cacheReadTokens: r.usage.cache_read_input_tokens,
  }), { ...ZERO_USAGE });
}

describe('engine + Anthropic adapter + local Messages server + SQLite', () => {
  let server: MessagesServer;
  let db: ReturnType<typeof tempDb>;
  let clock: ManualClock;
  let rows: FakeRows;
  /** A fresh adapter per worker "process", as after a restart; no retry waits beyond 1 ms. */
  const claude = () => new AnthropicModel({ apiKey: 'sk-test', baseURL: server.url, env: {}, maxRetries: 2 });

  beforeAll(async () => { server = await startMessagesServer({ apiKey: 'sk-test', minCacheableTokens: 0 }); });
  afterAll(() => server.stop());
  beforeEach(() => {
    server.reset();
    db = tempDb();
    clock = new ManualClock();
    rows = new FakeRows();
  });
  afterEach(() => db.cleanup());

  it('after a crash and resume, the next request lists exactly the recorded steps, each once, none missing', async () => {
    server.otherwise(writeRows(5));
    const agent = rowsAgent(rows);
    const a = workerProcess({ dbPath: db.path, agent, model: claude(), clock, workerId: 'worker-A', crashAt: { point: 'C6', step: 2 } });
    await start(a.deps);
    await expect(drain(a.deps, a.runtime, clock)).rejects.toBeInstanceOf(SimulatedCrash);
    a.runtime.close();
    expect(server.requests).toHaveLength(2);

    const b = workerProcess({ dbPath: db.path, agent, model: claude(), clock, workerId: 'worker-B' });
    await drain(b.deps, b.runtime, clock);
    const state = await loadState(b.runtime);
    b.runtime.close();

    expect(state.status).toBe('completed');
    expect(state.summary).toBe('Wrote 5 rows, one per step.');
    expect(server.requests).toHaveLength(6);
    // The first request after the resume carries steps 1 and 2 as recorded, in order, once each.
    expect(completedStepLines(server.requests[2]!.userText)).toEqual(state.steps.slice(0, 2).map(stepLine));
    // Every request lists a prefix of the recorded steps: nothing repeated, nothing skipped.
    server.requests.forEach((request, i) => {
      expect(completedStepLines(request.userText)).toEqual(state.steps.slice(0, i).map(stepLine));
    });
    expect([1, 2, 3, 4, 5].map((n) => rows.timesReceived(`run/step-${n}`))).toEqual([1, 1, 1, 1, 1]);
    // The usage the server reported is what the run recorded, request by request.
    expect(state.usage).toEqual(reportedUsage(server.requests));
    expect(state.usage.cacheReadTokens).toBeGreaterThan(0);
    // Step 2 reads what step 1 wrote (the instructions and goal), as every later step reads its prefix.
    server.requests.slice(1).forEach((request, i) => expect(request.usage!.cache_read_input_tokens, `request ${i + 2}`).toBeGreaterThan(0));
  });

  it('a model outage (529 after the SDK\'s retries) is waited out for 30 failed tries, each one exhausted call, then fails the run', async () => {
    server.otherwise(apiError(529, 'Overloaded', { 'retry-after-ms': '1' }));
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: claude(), clock, workerId: 'w' });
    await start(deps);

    const seen: { failures: number; status: string }[] = [];
    for (let attempt = 1; attempt <= MAX_MODEL_UNAVAILABLE_FAILURES; attempt++) {
      const outcome = await advance(deps, 'run');
      expect(outcome.kind).toBe('advanced');
      const now = await loadState(runtime);
      seen.push({ failures: now.failures, status: now.status });
      expect(server.requests).toHaveLength(3 * attempt);
    }
    const state = await loadState(runtime);
    runtime.close();
    expect(MAX_MODEL_UNAVAILABLE_FAILURES).toBe(30);
    // Still running after the third try, where a failing tool would have failed the run.
    expect(seen.slice(0, -1).every((s, i) => s.failures === i + 1 && s.status === 'running')).toBe(true);
    expect(seen.at(-1)).toEqual({ failures: 30, status: 'failed' });
    expect(server.requests.slice(0, 6).map((r) => r.retryCount)).toEqual([0, 1, 2, 0, 1, 2]);
    expect(state.reason).toMatch(/^step 1 failed 30 times; last error: .*529 overloaded_error: Overloaded/);
    expect(state.steps).toHaveLength(0);
  });

  it('a run whose model comes back after an outage of five tries goes on with its steps', async () => {
    // Five exhausted calls of three requests each, then the API answers again.
    server.script(...Array.from({ length: 15 }, () => apiError(529, 'Overloaded', { 'retry-after-ms': '1' })));
    server.otherwise(writeRows(2));
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: claude(), clock, workerId: 'w' });
    await start(deps);
    for (let attempt = 1; attempt <= 5; attempt++) await advance(deps, 'run');
    expect(await loadState(runtime)).toMatchObject({ status: 'running', failures: 5 });
    for (let step = 0; step < 5 && (await loadState(runtime)).status === 'running'; step++) await advance(deps, 'run');
    const state = await loadState(runtime);
    runtime.close();
    expect(state).toMatchObject({ status: 'completed', failures: 0 });
    expect(state.steps.map((s) => s.tool)).toEqual(['write_row', 'write_row']);
    expect(rows.rows.size).toBe(2);
  });

  it.each([
    { path: 'the send and ack in the checkpoint\'s transaction', queueInCommit: true },
    { path: 'the send after the checkpoint, as on AWS', queueInCommit: false },
  ])('a 429 asking for 120 s, past the call\'s deadline: the next try waits the 120 s, not the 1 s backoff ($path)', async ({ queueInCommit }) => {
    server.script(apiError(429, 'rate limited', { 'retry-after': '120' }));
    server.otherwise(writeRows(1));
    const model = new AnthropicModel({ apiKey: 'sk-test', baseURL: server.url, env: {}, maxRetries: 2, deadlineMs: 30_000 });
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model, clock, workerId: 'w', queueInCommit });
    await start(deps);
    const [first] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    const handled = await handleDelivery(deps, first!);
    if (handled.action === 'ack' && !handled.acked) await runtime.queue.ack(first!);
    expect(handled).toMatchObject({ action: 'ack', outcome: { kind: 'advanced', retryAfterMs: 120_000, state: { failures: 1, status: 'running' } } });
    expect(progressLine(handled)).toMatch(/step 1 attempt 1 failed: .*429.*\(will retry in 120 s\)$/);
    expect(server.requests).toHaveLength(1);

    // Past the backoff (1 s) and well past it: nothing yet. At 120 s, the next try.
    clock.advance(60_000);
    expect(await runtime.queue.receive({ visibilityMs: VISIBILITY_MS })).toEqual([]);
    clock.advance(60_000);
    const [next] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
    expect(JSON.parse(next!.body)).toEqual({ runId: 'run', version: 2 });
    await runtime.queue.release(next!, 0);
    await drain(deps, runtime, clock);
    const state = await loadState(runtime);
    runtime.close();
    expect(state).toMatchObject({ status: 'completed', failures: 0 });
    expect(rows.rows.size).toBe(1);
  });

  it('a permanent error fails the run at once, with the reason', async () => {
    server.script(apiError(400, 'prompt is too long: 1200000 tokens > 1000000 maximum'));
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: claude(), clock, workerId: 'w' });
    await start(deps);
    await advance(deps, 'run');
    const state = await loadState(runtime);
    runtime.close();
    expect(server.requests).toHaveLength(1);
    expect(state.status).toBe('failed');
    expect(state.failures).toBe(1);
    expect(state.reason).toMatch(/^step 1: .*400 invalid_request_error: prompt is too long/);
  });

  it('a key a gateway echoes in its error never reaches the run\'s reason, its last error or a log line', async () => {
    // A gateway at ANTHROPIC_BASE_URL that names the key it was sent: in its 401, a 502 page, a 400.
    const echoed = (status: number, body: string): Reply => ({ type: 'raw', status, body });
    const lines: string[] = [];
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: claude(), clock, workerId: 'w' });
    deps.log = createLogger({}, { format: 'json', env: {}, write: (line) => { lines.push(line); } });
    await start(deps);
    const deliver = async () => {
      const [delivery] = await runtime.queue.receive({ visibilityMs: VISIBILITY_MS });
      const handled = await handleDelivery(deps, delivery!);
      if (handled.action === 'ack') await runtime.queue.ack(delivery!);
      else await runtime.queue.release(delivery!, 0);
      return handled;
    };

    server.otherwise(echoed(401, 'Unauthorized: x-api-key sk-test is not valid for this gateway'));
    expect(await deliver()).toMatchObject({ action: 'release' });
    server.otherwise(echoed(502, '<html>upstream failed; request headers: x-api-key=sk-test</html>'));
    clock.advance(VISIBILITY_MS);
    await deliver();
    const retried = await loadState(runtime);
    server.otherwise(echoed(400, JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message: 'header x-api-key: sk-test is malformed' } })));
    clock.advance(VISIBILITY_MS);
    await deliver();
    const state = await loadState(runtime);
    runtime.close();

    expect(retried).toMatchObject({ status: 'running', failures: 1, lastError: expect.stringContaining('request headers: x-api-key=***') });
    expect(state).toMatchObject({ status: 'failed', reason: expect.stringContaining('header x-api-key: *** is malformed') });
    expect(lines.map((line) => JSON.parse(line) as { event?: string }).map((line) => line.event)).toEqual(['checkpoint', 'model-key-refused', 'checkpoint', 'checkpoint']);
    expect(lines[1]).toContain('x-api-key *** is not valid');
    for (const line of lines) expect(line).not.toContain('sk-test');
  });

  it('malformed replies never crash the worker: each is a failed attempt, and the run goes on', async () => {
    server.script(
      toolUses([{ name: 'write_row', input: { row: 1 } }, { name: 'write_row', input: { row: 2 } }]),
      { type: 'raw', status: 200, body: '{"type":"message","content":' },
    );
    server.otherwise(writeRows(2));
    const { deps, runtime } = workerProcess({ dbPath: db.path, agent: rowsAgent(rows), model: claude(), clock, workerId: 'w' });
    await start(deps);

    await advance(deps, 'run');
    const afterInvalid = await loadState(runtime);
    expect(afterInvalid).toMatchObject({ status: 'running', step: 0, failures: 1 });
    expect(afterInvalid.lastError).toMatch(/2 tool calls/);
    await advance(deps, 'run');
    // The model is told why its reply was not used.
    expect(server.requests[1]!.userText).toContain('Your previous reply could not be used (2 tool calls in one reply (write_row, write_row)');
    expect(await loadState(runtime)).toMatchObject({ status: 'running', step: 0, failures: 2 });

    await drain(deps, runtime, clock);
    const state = await loadState(runtime);
    runtime.close();
    expect(state).toMatchObject({ status: 'completed', step: 2, failures: 0 });
    expect(rows.rows.size).toBe(2);
  });

  it('a crash between the model call and a side-effecting tool call does not ask the model again for that step', async () => {
    server.otherwise(writeRows(5));
    const agent = rowsAgent(rows);
    const a = workerProcess({ dbPath: db.path, agent, model: claude(), clock, workerId: 'worker-A', crashAt: { point: 'C3', step: 2 } });
    await start(a.deps);
    await expect(drain(a.deps, a.runtime, clock)).rejects.toBeInstanceOf(SimulatedCrash);
    a.runtime.close();
    expect(server.requests).toHaveLength(2);
    expect(rows.timesReceived('run/step-2')).toBe(0);

    const b = workerProcess({ dbPath: db.path, agent, model: claude(), clock, workerId: 'worker-B' });
    await drain(b.deps, b.runtime, clock);
    const state = await loadState(b.runtime);
    b.runtime.close();

    // Steps 3, 4, 5 and DONE: four requests after the restart, none of them for step 2.
    expect(server.requests).toHaveLength(6);
    expect(server.requests.slice(2).map((r) => completedStepLines(r.userText).length)).toEqual([2, 3, 4, 5]);
    expect(state.status).toBe('completed');
    expect(state.steps[1]).toMatchObject({ step: 2, tool: 'write_row', input: { row: 2 }, workerId: 'worker-B' });
    expect(rows.timesReceived('run/step-2')).toBe(1);
    // Step 2's recorded decision kept the usage of the one model call that made it.
    expect(state.usage).toEqual(reportedUsage(server.requests));
  });
});
