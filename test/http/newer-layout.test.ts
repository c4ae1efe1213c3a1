import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAYOUT_VERSION } from '../../lib/local/database.ts';
import { runWaitingForApproval, startHttpApp } from '../support/http-app.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
beforeAll(async () => { app = await startHttpApp(); });
afterAll(async () => { await app?.close(); });

describe('serve on a file a newer release brought forward under it', () => {
  it('answers a write with a 409 naming the layout and what to do, where it was a 400 (the caller\'s fault); nothing is written', async () => {
    const { version } = await runWaitingForApproval(app, 'layout-1');
    // A newer release's first process brings the file forward (its own connection, as another process's).
    const other = new Database(app.runtime.db.name);
    other.pragma(`user_version = ${LAYOUT_VERSION + 1}`);
    other.close();
    const response = await app.api('/runs/layout-1/cancel', { method: 'POST', body: JSON.stringify({ by: 'ops@example.com' }) });
    expect(response.status).toBe(409);
    expect((await response.json() as { error: string }).error).toMatch(new RegExp(`^the database .+ was brought to layout ${LAYOUT_VERSION + 1} by a newer stepwise release while this process had it open; .*stop this release's workers`));
    expect((await app.runtime.store.load('layout-1'))!).toMatchObject({ status: 'waiting', version });
    // The inspector's form gets a page saying so.
    const page = await app.api('/inspect/runs/layout-1/cancel', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: '' });
    expect(page.status).toBe(409);
    expect(await page.text()).toContain(`brought to layout ${LAYOUT_VERSION + 1} by a newer stepwise release`);
  });
});
