import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_TOKEN, startHttpApp } from '../support/http-app.ts';

let app: Awaited<ReturnType<typeof startHttpApp>>;
beforeAll(async () => { app = await startHttpApp(); });
afterAll(async () => { await app?.close(); });

const signIn = (headers: Record<string, string> = {}) => fetch(`${app.url}/inspect?token=${API_TOKEN}`, { redirect: 'manual', headers });
const cookieOf = (response: Response) => response.headers.get('set-cookie') ?? '';

/**
 * The inspector's cookie: browsers send a host's cookies to every port of it, so another server on the
 * same host with an /inspect path was sent the API token itself, which opens the whole API.
 */
describe("the inspector's sign-in cookie", () => {
  it('holds a session value, not the API token: it opens the inspector and nothing else', async () => {
    const response = await signIn();
    expect(response.status).toBe(303);
    const cookie = cookieOf(response);
    const value = /stepwise_token=([^;]+)/.exec(cookie)?.[1];
    expect(value).toBeTruthy();
    expect(cookie).not.toContain(API_TOKEN);
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Strict/);
    expect(cookie).not.toMatch(/Secure/);
    expect((await fetch(`${app.url}/inspect`, { headers: { cookie: `stepwise_token=${value}` } })).status).toBe(200);
    // As a bearer token on the API it is refused: only the token opens the API.
    expect((await fetch(`${app.url}/runs`, { headers: { authorization: `Bearer ${value}` } })).status).toBe(401);
    // A cookie holding the token itself (what an older release set) no longer signs in: sign in again.
    expect((await fetch(`${app.url}/inspect`, { headers: { cookie: `stepwise_token=${API_TOKEN}` } })).status).toBe(401);
  });

  it('is Secure when the page came over HTTPS through a proxy', async () => {
    expect(cookieOf(await signIn({ 'x-forwarded-proto': 'https' }))).toMatch(/; Secure/);
  });
});
