import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordFailure } from '../../lib/core/transitions.ts';
import { TransientError } from '../../lib/core/errors.ts';
import { META, decisionFor, stateAfter } from '../support/states.ts';
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
});
