import type { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { ModelKeyError, TransientError, errorMessage } from '../core/errors.ts';
import { API_KEY_ENV, API_KEY_SECRET_ENV } from '../settings.ts';
import { rememberKey, type ApiKeySource } from './remember-key.ts';

export { KEY_REFRESH_MS, rememberKey, type ApiKeySource } from './remember-key.ts';

export { API_KEY_ENV, API_KEY_SECRET_ENV };

/** Fields a JSON secret may keep the key under (the console's key/value editor stores JSON). */
const SECRET_FIELDS = ['ANTHROPIC_API_KEY', 'apiKey', 'api_key'] as const;

/** Secrets Manager errors no immediate retry fixes (wrong id, no permission, undecryptable): the work waits for a fix. */
const KEY_SECRET_ERRORS = new Set([
  'ResourceNotFoundException', 'AccessDeniedException', 'AccessDeniedFault', 'DecryptionFailure',
  'InvalidParameterException', 'InvalidRequestException', 'UnrecognizedClientException',
]);

export interface ApiKeyConfig {
  source: ApiKeySource;
  /** Where the key is read from, for logs and `stepwise status`; never the key itself. */
  from: string;
}

/** The key source the environment asks for, or undefined if it names none. */
export function apiKeyFromEnv(env: NodeJS.ProcessEnv = process.env): ApiKeyConfig | undefined {
  const key = env[API_KEY_ENV]?.trim();
  if (key) return { source: async () => key, from: API_KEY_ENV };
  const secretId = env[API_KEY_SECRET_ENV]?.trim();
  if (secretId) return { source: secretsManagerApiKey(secretId), from: `Secrets Manager secret ${secretId} (${API_KEY_SECRET_ENV})` };
  return undefined;
}

/** Sources without an explicit client, one per secret id: a container reads each secret once, whoever asks. */
const containerSources = new Map<string, ApiKeySource>();

/**
 * The key stored in a Secrets Manager secret (the plain key, or JSON with an ANTHROPIC_API_KEY field),
 * remembered for KEY_REFRESH_MS and read again after that or after invalidate(): one read per container
 * every few minutes, not one per step, and a rotated key is picked up without a restart.
 */
export function secretsManagerApiKey(
  secretId: string, client?: SecretsManagerClient, options: { refreshMs?: number; now?: () => number } = {},
): ApiKeySource {
  if (!client) {
    const shared = containerSources.get(secretId);
    if (shared) return shared;
  }
  // The SDK is imported at the first read, not when the module loads: a local run with a key in the
  // environment never needs it.
  let sm = client;
  const source = rememberKey(async () => {
    let value: string | undefined;
    try {
      const { GetSecretValueCommand, SecretsManagerClient } = await import('./secrets-client.ts');
      sm ??= new SecretsManagerClient({});
      value = (await sm.send(new GetSecretValueCommand({ SecretId: secretId }))).SecretString;
    } catch (error) {
      const name = (error as { name?: string }).name ?? '';
      const message = `cannot read the Anthropic API key from secret ${secretId}: ${name ? `${name}: ` : ''}${errorMessage(error)}`;
      throw KEY_SECRET_ERRORS.has(name) ? new ModelKeyError(message, { cause: error }) : new TransientError(message, { cause: error });
    }
    return keyFromSecret(value, secretId);
  }, options);
  if (!client) containerSources.set(secretId, source);
  return source;
}

/** The key in a secret's value; a value without one is a ModelKeyError: the work waits until the secret is fixed. */
export function keyFromSecret(value: string | undefined, secretId: string): string {
  const text = value?.trim();
  if (!text) throw new ModelKeyError(`secret ${secretId} has no string value (a binary secret cannot hold the API key)`);
  if (!text.startsWith('{')) return text;
  let fields: Record<string, unknown>;
  try {
    fields = JSON.parse(text) as Record<string, unknown>;
  } catch {
    throw new ModelKeyError(`secret ${secretId} starts like JSON but does not parse`);
  }
  for (const field of SECRET_FIELDS) {
    const key = fields[field];
    if (typeof key === 'string' && key.trim()) return key.trim();
  }
  throw new ModelKeyError(`secret ${secretId} is JSON without a ${SECRET_FIELDS.join(' / ')} field`);
}

/**
 * Why a key cannot be what it is meant to be, or undefined; never the key itself. A key is printable ASCII
 * with no space: fetch refuses a header with a line break or a character past U+00FF before any request
 * is sent, with a message that named neither the key nor the character's position ("Cannot convert
 * argument to a ByteString ..."), and each run failed with it as a model call that failed three times.
 */
export function keyProblem(key: string): string | undefined {
  const at = key.search(/[^\x21-\x7e]/);
  if (at < 0) return undefined;
  const code = key.codePointAt(at)!.toString(16).toUpperCase().padStart(4, '0');
  return `character ${at + 1} of its ${key.length} is U+${code}, which no key holds (a line break, a space, or a typographic dash, ellipsis or invisible character copied with it?)`;
}
