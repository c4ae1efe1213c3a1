import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { runWaitingForApproval, startHttpApp } from '../support/http-app.ts';

/**
 * Another process holds the SQLite file's write lock past the busy timeout (a `stepwise` command frozen
 * inside its commit by Ctrl-Z or kill -STOP, a sqlite3 shell left in a transaction). A write then fails
 * with SQLITE_BUSY, which the app answered as a 500 "internal error", logged as a failed request, and as
 * JSON on the approver's page: the client was not told it could simply ask again.
 */
describe('requests while another process holds the database locked', () => {
  let app: Awaited<ReturnType<typeof startHttpApp>>;
  let other: Database.Database | undefined;
  afterEach(async () => {
    if (other?.inTransaction) other.exec('ROLLBACK');
    other?.close();
    await app?.close();
  });

  it('are refused as 503 with Retry-After, saying the lock is why and nothing changed; a page for the approver', async () => {
    app = await startHttpApp();
    const { link, version: before } = await runWaitingForApproval(app);

    // The app's connection gives up after 20 ms rather than 10 s; the other connection holds the lock.
    app.runtime.db.pragma('busy_timeout = 20');
    other = new Database(app.runtime.db.name);
    other.exec('BEGIN IMMEDIATE');

    const started = await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'g', runId: 'new' }) });
    expect(started.status).toBe(503);
    expect(started.headers.get('retry-after')).toBe('5');
    expect((await started.json() as { error: string }).error).toMatch(/^the database is locked: another process held the write lock on it for over 10 s .*a write that did not finish changed nothing: try again/);

    const pressed = await fetch(link, { method: 'POST', body: new URLSearchParams({ decision: 'approve' }) });
    expect(pressed.status).toBe(503);
    expect(pressed.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await pressed.text()).toContain('The database is locked by another process, so nothing was changed: try again in a few seconds.');

    // Let go, the same requests go through.
    other.exec('COMMIT');
    expect(await app.runtime.store.load('new')).toBeUndefined();
    expect((await app.runtime.store.load('run'))!.version).toBe(before);
    expect((await app.api('/runs', { method: 'POST', body: JSON.stringify({ goal: 'g', runId: 'new' }) })).status).toBe(201);
    expect(await (await fetch(link, { method: 'POST', body: new URLSearchParams({ decision: 'approve' }) })).text()).toContain('Approved. The run continues.');
  });
});
