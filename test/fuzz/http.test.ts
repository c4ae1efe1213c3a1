import fc from 'fast-check';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeState } from '../../lib/core/codec.ts';
import { verifyApproval } from '../../lib/waits/approval-token.ts';
import { MAX_EVENT_BYTES, MAX_EVENT_DEPTH } from '../../lib/waits/events.ts';
import { fuzzRuns } from '../support/fuzz-runs.ts';
import { start } from '../support/harness.ts';
import { API_TOKEN, startHttpApp } from '../support/http-app.ts';
import { outboxEmails } from '../support/outbox.ts';
import { workVisible } from '../support/queue-work.ts';
import { keysOf } from '../../lib/waits/signing-key.ts';

/**
 * Every HTTP entry point, fed arbitrary paths, bodies, tokens and forms over a real socket: never a 5xx
 * (a crash), always a 4xx with a message for bad input, and the waiting run left exactly as it was.
 */
let app: Awaited<ReturnType<typeof startHttpApp>>;
let token: string;
let waitId: string;
const version = async () => (await app.runtime.store.load('run'))!.version;

beforeAll(async () => {
  app = await startHttpApp();
  await start(app.deps, 'copy, then drop old_rows with approval', 'run');
  await workVisible(app.deps, app.runtime);
  const state = decodeState((await app.runtime.store.load('run'))!);
  expect(state.status).toBe('waiting');
  waitId = state.wait!.id;
  token = outboxEmails(join(app.dir, 'outbox'))[0]!.link.split('/approvals/')[1]!;
});
afterAll(async () => { await app?.close(); });

const segment = fc.oneof(fc.string({ maxLength: 40 }), fc.constantFrom('run', '..', '%2e%2e', '%00', 'runs', 'waits', ' ', '\u00e9', 'x'.repeat(600)));
const jsonish = fc.oneof(
  fc.json({ maxDepth: 4 }),
  fc.string({ maxLength: 200 }),
  fc.constantFrom('', '{', 'null', '[]', '{"goal":""}', '{"goal":"g","runId":"../x"}', '{"decision":"approve"}', '{"type":"a","key":"b","payload":' + '['.repeat(5000) + ']'.repeat(5000) + '}'),
);

async function send(method: string, path: string, body?: string, headers: Record<string, string> = {}) {
  const response = await fetch(`${app.url}${path}`, {
    method, headers: { authorization: `Bearer ${API_TOKEN}`, 'content-type': 'application/json', ...headers },
    ...(body !== undefined && method !== 'GET' && method !== 'HEAD' ? { body } : {}),
  });
  return { status: response.status, text: await response.text(), type: response.headers.get('content-type') ?? '' };
}

describe('fuzzing the HTTP app', () => {
  it('API routes: arbitrary paths and bodies get a 2xx or a 4xx with an error message, never a 5xx; the waiting run is untouched', async () => {
    const before = await version();
    await fc.assert(fc.asyncProperty(
      fc.constantFrom('GET', 'POST', 'PUT', 'DELETE'),
      fc.oneof(
        segment.map((s) => `/runs/${encodeURIComponent(s)}`),
        segment.map((s) => `/runs/${encodeURIComponent(s)}/history`),
        fc.tuple(segment, segment).map(([r, w]) => `/runs/${encodeURIComponent(r)}/waits/${encodeURIComponent(w)}`),
        fc.constantFrom('/runs', '/events', '/waits', '/health', '/runs?limit=-1', '/runs?status=nope', '/runs?limit=99999999999'),
        segment.map((s) => `/${encodeURIComponent(s)}`),
      ),
      jsonish,
      async (method, path, body) => {
        const r = await send(method, path, body);
        expect(r.status, `${method} ${path} ${body.slice(0, 200)} -> ${r.text.slice(0, 300)}`).toBeLessThan(500);
        if (r.status >= 400) expect(JSON.parse(r.text).error).toEqual(expect.any(String));
      },
    ), fuzzRuns(150));
    expect(await version()).toBe(before);
    expect(decodeState((await app.runtime.store.load('run'))!).wait?.id).toBe(waitId);
  });

  it('answers to the open wait with arbitrary bodies are refused with a 400 unless they are a valid answer', async () => {
    const before = await version();
    await fc.assert(fc.asyncProperty(
      fc.oneof(fc.json({ maxDepth: 3 }), fc.record({ decision: fc.string({ maxLength: 10 }), by: fc.anything() }).map((o) => JSON.stringify(o))),
      async (body) => {
        let valid = false;
        try {
          const parsed = JSON.parse(body) as { decision?: unknown; by?: unknown };
          valid = typeof parsed === 'object' && parsed !== null && ['approve', 'reject'].includes(parsed.decision as string);
        } catch { /* not JSON */ }
        fc.pre(!valid);
        const r = await send('POST', `/runs/run/waits/${waitId}`, body);
        expect(r.status, `${body} -> ${r.text}`).toBe(400);
        expect(JSON.parse(r.text).error).toEqual(expect.any(String));
      },
    ), fuzzRuns(100));
    expect(await version()).toBe(before);
  });

  it('approval links: arbitrary and altered tokens, GET or POST with any form, never decide, never 5xx', async () => {
    const before = await version();
    const altered = fc.tuple(fc.nat({ max: token.length - 1 }), fc.string({ minLength: 1, maxLength: 3 }), fc.constantFrom('replace', 'cut', 'append', 'insert'))
      .map(([i, s, how]) => how === 'replace' ? token.slice(0, i) + s + token.slice(i + 1)
        : how === 'cut' ? token.slice(0, i) : how === 'append' ? token + s : token.slice(0, i) + s + token.slice(i))
      .filter((t) => t !== token);
    await fc.assert(fc.asyncProperty(
      fc.oneof(altered, fc.string({ maxLength: 300 }), fc.constantFrom('v1', 'v1..', 'v1.e30.', 'v2.' + token.slice(3))),
      fc.constantFrom('GET', 'POST'),
      fc.dictionary(fc.constantFrom('decision', 'comment', 'by', 'x'), fc.oneof(fc.constantFrom('approve', 'reject'), fc.string({ maxLength: 30 }))),
      async (bad, method, form) => {
        const response = await fetch(`${app.url}/approvals/${encodeURIComponent(bad)}`, {
          method, ...(method === 'POST' ? { body: new URLSearchParams(form) } : {}), redirect: 'manual',
        });
        await response.text();
        expect(response.status, `${method} /approvals/${bad}`).toBeGreaterThanOrEqual(400);
        expect(response.status).toBeLessThan(500);
        // An altered token never verifies as some other claim.
        expect(verifyApproval(bad, keysOf(await app.signingKey()).accepted, app.clock.now()).ok).toBe(false);
      },
    ), fuzzRuns(150));
    expect(await version()).toBe(before);
  });

  it('the real link with an arbitrary form post: refused with a 400 unless it is approve or reject', async () => {
    const before = await version();
    await fc.assert(fc.asyncProperty(
      fc.dictionary(fc.constantFrom('decision', 'comment', 'x'), fc.string({ maxLength: 20 })).filter((f) => !['approve', 'reject'].includes(f.decision ?? '')),
      async (form) => {
        const response = await fetch(`${app.url}/approvals/${token}`, { method: 'POST', body: new URLSearchParams(form), redirect: 'manual' });
        await response.text();
        expect(response.status).toBe(400);
      },
    ), fuzzRuns(60));
    expect(await version()).toBe(before);
  });

  it('events with arbitrary fields and payloads: 202 (kept) exactly when the event is valid, else 400 with the field named, never a 5xx', async () => {
    // Mostly valid fields, so that one field at its edge decides the answer: names of the allowed characters
    // 1, 2, 255 and 256 long, and (less often) 0 or 257 long, with a character outside the rule (a space, a
    // unicode letter) anywhere in them, or not text at all.
    const allowed = [...'abcXYZ059._:/@+-'];
    const named = (n: number) => fc.tuple(fc.constantFrom('a', 'Z', '0'), fc.string({ unit: fc.constantFrom(...allowed), minLength: n - 1, maxLength: n - 1 })).map(([first, rest]) => first + rest);
    const name = fc.oneof(
      { weight: 6, arbitrary: fc.oneof(fc.constantFrom(1, 2, 255, 256).chain(named), fc.constantFrom('order.paid', 'a')) },
      { weight: 1, arbitrary: fc.oneof(
        fc.constant(''), named(257), fc.constantFrom('-a', '.', 'é', ' a'),
        fc.tuple(named(5), fc.nat(), fc.constantFrom(' ', '\u00e9', '\n', '%', '\u0000')).map(([s, at, ch]) => { const i = at % (s.length + 1); return s.slice(0, i) + ch + s.slice(i); }),
        fc.string({ maxLength: 300, unit: 'grapheme' }), fc.integer(), fc.constant(null),
      ) },
    );
    const id = fc.oneof(fc.constantFrom(0, 1, 256, 257).map((n) => 'i'.repeat(n)), fc.string({ maxLength: 300 }), fc.integer());
    // Payloads under and at the limits: nested to MAX_EVENT_DEPTH and one past it, and a text of exactly
    // MAX_EVENT_BYTES of JSON and one byte more (made in the property from its length, so a failure prints
    // the length, not the text).
    const nested = (depth: number): unknown => { let v: unknown = 1; for (let i = 0; i < depth; i++) v = i % 2 ? { a: v } : [v]; return v; };
    const payload = fc.oneof(
      fc.jsonValue({ maxDepth: 4 }),
      fc.constantFrom(MAX_EVENT_DEPTH - 1, MAX_EVENT_DEPTH, MAX_EVENT_DEPTH + 1).map(nested),
      fc.constantFrom(MAX_EVENT_BYTES - 2, MAX_EVENT_BYTES - 1).map((n) => ({ textOfLength: n })),
    );
    const event = fc.record({
      type: name, key: name, id: fc.option(id, { nil: undefined, freq: 2 }), payload: fc.option(payload, { nil: undefined, freq: 4 }),
      extra: fc.oneof({ weight: 6, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 1 }) }),
    }).map(({ extra, ...e }) => Object.fromEntries(Object.entries({ ...e, ...(extra === undefined ? {} : { extra }) }).filter(([, v]) => v !== undefined)) as { type: unknown; key: unknown });
    let kept = 0;
    await fc.assert(fc.asyncProperty(event, async (generated) => {
      const { payload: p } = generated as { payload?: { textOfLength?: number } };
      const e = typeof p?.textOfLength === 'number' ? { ...generated, payload: 'p'.repeat(p.textOfLength) } : generated;
      const r = await send('POST', '/events', JSON.stringify(e));
      const shown = `${JSON.stringify(e).slice(0, 200)} -> ${r.text.slice(0, 300)}`;
      expect(r.status, shown).toBe(validEvent(e) ? 202 : 400);
      if (r.status === 400) expect(JSON.parse(r.text).error).toEqual(expect.any(String));
      else kept++;
    }), fuzzRuns(200));
    // The generators reach valid events, not only refusals.
    expect(kept).toBeGreaterThan(0);
  });
});

/** The event rule as the API's refusals state it, written here on its own (not with the code's regex or schema): a type and a key of 1-256 letters, digits or ._:/@+- (starting with a letter or digit), an optional id of 1-256 characters with no lone surrogate, a JSON payload of at most MAX_EVENT_BYTES nested at most MAX_EVENT_DEPTH deep, nothing else. */
function validEvent(e: { type: unknown; key: unknown; id?: unknown; payload?: unknown; extra?: unknown }): boolean {
  const name = (v: unknown) => typeof v === 'string' && /^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$/.test(v) && v.length <= 256;
  const depth = (v: unknown): number => (v !== null && typeof v === 'object' ? Math.max(0, ...Object.values(v).map((c) => 1 + depth(c))) : 0);
  return name(e.type) && name(e.key) && !('extra' in e)
    && (e.id === undefined || (typeof e.id === 'string' && e.id.length >= 1 && e.id.length <= 256 && e.id.isWellFormed()))
    && depth(e.payload) <= MAX_EVENT_DEPTH && Buffer.byteLength(JSON.stringify(e.payload ?? null)) <= MAX_EVENT_BYTES;
}
