import { afterEach, describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs file the Lambda bundles alias, with no declarations of its own
import { credentialsTreatedAsExpired, defaultProvider } from '../../infra/lambda-credentials.mjs';

const KEYS = ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'AWS_CREDENTIAL_EXPIRATION'] as const;
const saved = Object.fromEntries(KEYS.map((k) => [k, process.env[k]]));
afterEach(() => {
  for (const k of KEYS) {
    if (saved[k] === undefined) delete process.env[k];
    else process.env[k] = saved[k];
  }
});

/**
 * The credential chain of the Lambda bundles (infra/worker-bundle.ts aliases the SDK's default chain to it):
 * the execution role's credentials from the environment, where Lambda puts them. The bundled worker's test
 * (synth-bundle-aws.test.ts) runs a step with it against DynamoDB Local and fauxqs.
 */
describe("the Lambda bundles' credentials", () => {
  it("reads the role's credentials, session token and expiry from the environment", async () => {
    Object.assign(process.env, { AWS_ACCESS_KEY_ID: 'AKIDEXAMPLE', AWS_SECRET_ACCESS_KEY: 'secret', AWS_SESSION_TOKEN: 'token', AWS_CREDENTIAL_EXPIRATION: '2030-01-01T00:00:00Z' });
    const credentials = await defaultProvider({})();
    expect(credentials).toEqual({ accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'secret', sessionToken: 'token', expiration: new Date('2030-01-01T00:00:00Z') });
    expect(credentialsTreatedAsExpired(credentials)).toBe(false);
    expect(credentialsTreatedAsExpired({ ...credentials, expiration: new Date(Date.now() + 60_000) })).toBe(true);
  });

  it('says so when the environment has none, naming the variables', async () => {
    for (const k of KEYS) delete process.env[k];
    await expect(defaultProvider({})()).rejects.toThrow('no AWS credentials in the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)');
  });
});
