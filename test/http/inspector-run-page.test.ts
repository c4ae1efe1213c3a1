import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { shapeResult } from '../../lib/core/result.ts';
import { completeStep, recordFailure } from '../../lib/core/transitions.ts';
import { TransientError } from '../../lib/core/errors.ts';
import { META, decisionFor, recordFor, stateAfter } from '../support/states.ts';
import { STEP_PAGE_OUTPUT_CHARS } from '../../lib/http/inspector-pages.ts';
import { startHttpApp } from '../support/http-app.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
beforeAll(async () => { app = await startHttpApp(); });
afterAll(async () => { await app?.close(); });

describe("the inspector's run page", () => {
  it("says a step's failed attempts and their last error, and the decision recorded for it, as `stepwise show` does", async () => {
    const store = app.runtime.store;
    const runId = 'failing-run';
    const state = stateAfter(runId, 2);
    await store.create(state, META);
    // Step 3's call decided and recorded, then its tool failed twice: the run is running, retrying it.
    await store.recordDecision(runId, 1, decisionFor(runId, 3, { row: 3 }));
    const failed = recordFailure(recordFailure(state, new TransientError('first'), 5_000), new TransientError('connection reset by <db-1> \u202eexceeded'), 6_000);
    await store.commit({ runId, expectedVersion: 1, state: failed, ...META });

    const page = await (await app.api(`/inspect/runs/${runId}`)).text();
    expect(page).toContain('<b id="status">running</b>');
    // The page said nothing of why the run did not move: the tool's error was nowhere on it.
    expect(page).toContain('<p id="failures">2 failed attempts at step 3, the last: <bdi id="last-error">connection reset by &lt;db-1&gt; \u202eexceeded</bdi></p>');
    expect(page).toContain('<p id="pending">step 3: write_row <bdi><code>{&quot;row&quot;:3}</code></bdi>, decided and recorded before its tool ran (idempotency key <code>failing-run/step-3</code>); its result is not yet recorded</p>');

    // A run with no failed attempt and nothing pending says neither.
    await store.create(stateAfter('quiet-run', 2), META);
    const quiet = await (await app.api('/inspect/runs/quiet-run')).text();
    expect(quiet).not.toContain('id="failures"');
    expect(quiet).not.toContain('id="pending"');
  });

  it('shows a step whole: its arguments and its output, an output stored by reference read from the blob store, and each as plain text', async () => {
    const store = app.runtime.store;
    const runId = 'big-output';
    let state = stateAfter(runId, 1);
    await store.create(state, META);
    // Step 2's output is over the inline limit: the checkpoint holds an excerpt and the ref, the blob store the rest.
    const hostile = '<script>alert(1)</script>';
    const output = `${hostile}${'row,'.repeat(5_000)}the end`;
    const shaped = shapeResult(output, true);
    expect(shaped.blob).toBeDefined();
    const big = { ...recordFor(runId, 2), input: { query: `${hostile}${'x'.repeat(500)}` }, result: shaped.result };
    state = completeStep(state, big, 5_000);
    await store.commit({ runId, expectedVersion: 1, state, appended: big, blobs: [shaped.blob!], ...META });

    // The timeline's excerpts link to each step's page.
    const run = await (await app.api(`/inspect/runs/${runId}`)).text();
    expect(run).toContain(`<a class="step" href="/inspect/runs/${runId}/steps/2">2</a>`);
    const page = await app.api(`/inspect/runs/${runId}/steps/2`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("default-src 'none'");
    const text = await page.text();
    expect(text).not.toContain(hostile);
    expect(text).toContain(`<pre id="arguments">{\n  &quot;query&quot;: &quot;&lt;script&gt;alert(1)&lt;/script&gt;${'x'.repeat(500)}&quot;\n}</pre>`);
    expect(text).toContain(`from the blob store as <code>${shaped.result.ref}</code>`);
    expect(text).toContain(`<pre id="output">&lt;script&gt;alert(1)&lt;/script&gt;${'row,'.repeat(5_000)}the end</pre>`);
    const raw = await app.api(`/inspect/runs/${runId}/steps/2/output`);
    expect(raw.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(raw.headers.get('x-content-type-options')).toBe('nosniff');
    expect(await raw.text()).toBe(output);

    // Its blob gone: the page says so and shows the excerpt the checkpoint keeps.
    const missingRef = 'sha256:' + '0'.repeat(64);
    const lost = { ...recordFor(runId, 3), result: { ...shaped.result, ref: missingRef } };
    state = completeStep(state, lost, 6_000);
    await store.commit({ runId, expectedVersion: 2, state, appended: lost, ...META });
    const missing = await (await app.api(`/inspect/runs/${runId}/steps/3`)).text();
    expect(missing).toContain(`was stored as <code>${missingRef}</code>, which the blob store no longer has`);
    expect((await app.api(`/inspect/runs/${runId}/steps/3/output`)).status).toBe(404);

    // Past what one page holds: the page says how much it shows, and links to the whole.
    const huge = 'y'.repeat(STEP_PAGE_OUTPUT_CHARS + 10);
    const hugeShaped = shapeResult(huge, true);
    const last = { ...recordFor(runId, 4), result: hugeShaped.result };
    state = completeStep(state, last, 7_000);
    await store.commit({ runId, expectedVersion: 3, state, appended: last, blobs: [hugeShaped.blob!], ...META });
    const cut = await (await app.api(`/inspect/runs/${runId}/steps/4`)).text();
    expect(cut).toContain(`The first 1,000,000 of its 1,000,010 characters; <a id="whole" href="/inspect/runs/${runId}/steps/4/output">the whole output</a>`);
    expect(cut).toContain(`<pre id="output">${'y'.repeat(STEP_PAGE_OUTPUT_CHARS)}</pre>`);
    expect(await (await app.api(`/inspect/runs/${runId}/steps/4/output`)).text()).toBe(huge);

    // A step with no record, a step not in digits, a run that is not there: each a page that says so.
    const none = await app.api(`/inspect/runs/${runId}/steps/9`);
    expect(none.status).toBe(404);
    expect(await none.text()).toContain(`Run ${runId} has 4 completed steps; step 9 has no record.`);
    expect((await app.api(`/inspect/runs/${runId}/steps/0x2`)).status).toBe(400);
    expect((await app.api('/inspect/runs/no-such-run/steps/1')).status).toBe(404);
  });
});
