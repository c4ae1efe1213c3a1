import { afterEach, describe, expect, it } from 'vitest';
import { runWaitingForApproval, startHttpApp } from '../support/http-app.ts';

/**
 * The disk that holds the SQLite file fills up under `stepwise serve`. A write then fails with SQLITE_FULL
 * (made here by capping the file at the pages it has), which the app answered as a 500 "internal error",
 * to an approver pressing Approve too: neither the caller nor the log said the disk was full.
 */
describe('requests while the disk that holds the database is full', () => {
  let app: Awaited<ReturnType<typeof startHttpApp>>;
  afterEach(async () => {
    await app?.close();
  });

  it('are refused as 507, saying the disk is full and nothing changed; a page for the approver', async () => {
    app = await startHttpApp();
    const { link, version: before } = await runWaitingForApproval(app);

    // Both of the app's connections (the checkpoints', the queue's) may hold no more pages than the file has:
    // the next new page is SQLITE_FULL.
    const cap = () => {
      for (const db of [app.runtime.db, app.runtime.queue['db']]) db.pragma(`max_page_count = ${db.pragma('page_count', { simple: true }) as number}`);
    };
    cap();
    // A goal of 16 KB needs pages of its own.
    const started = await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'g'.repeat(16 * 1024), runId: 'new' }) });
    expect(started.status).toBe(507);
    expect(await started.json()).toEqual({ error: 'the disk that holds the database is full, so nothing was changed: try again once space is freed on it' });

    const pressed = await fetch(link, { method: 'POST', body: new URLSearchParams({ decision: 'approve', comment: 'c'.repeat(4000) }) });
    expect(pressed.status).toBe(507);
    expect(pressed.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await pressed.text()).toContain('the disk that holds the database is full, so nothing was changed: try again once space is freed on it');

    // Space freed, the same requests go through.
    for (const db of [app.runtime.db, app.runtime.queue['db']]) db.pragma('max_page_count = 1073741823');
    expect(await app.runtime.store.load('new')).toBeUndefined();
    expect((await app.runtime.store.load('run'))!.version).toBe(before);
    expect((await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'g'.repeat(16 * 1024), runId: 'new' }) })).status).toBe(201);
    expect(await (await fetch(link, { method: 'POST', body: new URLSearchParams({ decision: 'approve', comment: 'c'.repeat(4000) }) })).text()).toContain('Approved. The run continues.');
  });
});
