// Stands in for @aws-sdk/credential-provider-node in the Lambda bundles (infra/worker-bundle.ts), as
// no-pino-transports.cjs does for pino's thread-stream. Lambda gives every function its execution role's
// credentials in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), the first
// link of the SDK's default chain. Its other links (profiles, SSO, a credential process, web identity, the
// container and instance metadata services) never run there, and with the STS and SSO clients they load
// they were 86 KB of the worker's bundle, which this session's changes had taken past 1 MB. The CLI,
// which is not bundled, keeps the whole chain. Credentials that are not there are said so.

/** The SDK's own rule (credential-provider-node): credentials within 5 minutes of expiring are fetched again. */
const REFRESH_BEFORE_MS = 300_000;

export const defaultProvider = () => async () => {
  const { AWS_ACCESS_KEY_ID: accessKeyId, AWS_SECRET_ACCESS_KEY: secretAccessKey, AWS_SESSION_TOKEN: sessionToken, AWS_CREDENTIAL_EXPIRATION: expiration } = process.env;
  if (!accessKeyId || !secretAccessKey) {
    throw Object.assign(new Error('no AWS credentials in the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY): the stepwise Lambda bundles take the execution role\'s from there, where Lambda puts them'), { name: 'CredentialsProviderError', tryNextLink: false });
  }
  return { accessKeyId, secretAccessKey, ...(sessionToken ? { sessionToken } : {}), ...(expiration ? { expiration: new Date(expiration) } : {}) };
};

export const credentialsWillNeedRefresh = (credentials) => credentials?.expiration !== undefined;
export const credentialsTreatedAsExpired = (credentials) => credentials?.expiration !== undefined && credentials.expiration.getTime() - Date.now() < REFRESH_BEFORE_MS;
