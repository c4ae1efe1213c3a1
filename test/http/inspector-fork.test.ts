import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { startHttpApp } from '../support/http-app.ts';
import { workVisible } from '../support/queue-work.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
beforeAll(async () => { app = await startHttpApp(); });
afterAll(async () => { await app?.close(); });

const fork = (runId: string, fromStep: string) => app.api(`/inspect/runs/${runId}/fork`, {
  method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ fromStep }).toString(),
});

describe("the inspector's fork form", () => {
  it('reads the step as digits only, as GET /runs/:id/steps/:step does: "" is not step 0, nor " 1", "0x1", "1e0" step 1', async () => {
    expect((await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'copy the rows', runId: 'insp-f' }) })).status).toBe(201);
    await workVisible(app.deps, app.runtime);
    expect(decodeState((await app.runtime.store.load('insp-f'))!).step).toBe(1);
    const runs = async () => (await app.runtime.store.list({ limit: 100 })).map((r) => r.runId).sort();
    const before = await runs();

    for (const written of ['', ' 1', '0x1', '1e0', '1.0', '-1', '+1']) {
      const refused = await fork('insp-f', written);
      expect(refused.status, JSON.stringify(written)).toBe(400);
      const page = await refused.text();
      expect(page, JSON.stringify(written)).toContain('The step to fork from is a whole number from 0, in digits only; got');
      expect(page, JSON.stringify(written)).toContain(JSON.stringify(written).replace(/"/g, '&quot;'));
    }
    // A body that does not parse as the multipart form it names: the same page, not a 500.
    const unparsed = await app.api('/inspect/runs/insp-f/fork', { method: 'POST', redirect: 'manual', headers: { 'content-type': 'multipart/form-data' }, body: 'fromStep=1' });
    expect(unparsed.status).toBe(400);
    expect(await unparsed.text()).toContain('The step to fork from is a whole number from 0, in digits only; got none');
    expect(await runs()).toEqual(before);

    const forked = await fork('insp-f', '1');
    expect(forked.status).toBe(303);
    expect(forked.headers.get('location')).toMatch(/^\/inspect\/runs\/insp-f-fork-1-[0-9a-f]+$/);
    // The fork's page says where it came from, with a link there, as status, show and history do.
    const page = await (await app.api(forked.headers.get('location')!)).text();
    expect(page).toMatch(/<p id="forked-from">forked from <a href="\/inspect\/runs\/insp-f">insp-f<\/a> after its step 1 \(version \d+\)<\/p>/);
    expect(await (await app.api('/inspect/runs/insp-f')).text()).not.toContain('forked-from');
  });
});
