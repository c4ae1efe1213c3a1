import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { PermanentError, TransientError, errorMessage } from '../core/errors.ts';

/** Where the Anthropic API key comes from: the environment locally, Secrets Manager on AWS. */
export type ApiKeySource = () => Promise<string>;

export const API_KEY_ENV = 'ANTHROPIC_API_KEY';
export const API_KEY_SECRET_ENV = 'ANTHROPIC_API_KEY_SECRET_ID';

/** Fields a JSON secret may keep the key under (the console's key/value editor stores JSON). */
const SECRET_FIELDS = ['ANTHROPIC_API_KEY', 'apiKey', 'api_key'] as const;

/** Secrets Manager errors that no retry can fix: wrong id, no permission, undecryptable. */
const PERMANENT_SECRET_ERRORS = new Set([
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
 * read once and remembered for the life of the process: one read per container, not one per step.
 */
export function secretsManagerApiKey(secretId: string, client?: SecretsManagerClient): ApiKeySource {
  if (!client) {
    const shared = containerSources.get(secretId);
    if (shared) return shared;
  }
  const sm = client ?? new SecretsManagerClient({});
  const source = rememberOnce(async () => {
    let value: string | undefined;
    try {
      value = (await sm.send(new GetSecretValueCommand({ SecretId: secretId }))).SecretString;
    } catch (error) {
      const name = (error as { name?: string }).name ?? '';
      const message = `cannot read the Anthropic API key from secret ${secretId}: ${name ? `${name}: ` : ''}${errorMessage(error)}`;
      throw PERMANENT_SECRET_ERRORS.has(name) ? new PermanentError(message, { cause: error }) : new TransientError(message, { cause: error });
    }
    return keyFromSecret(value, secretId);
  });
  if (!client) containerSources.set(secretId, source);
  return source;
}

export function keyFromSecret(value: string | undefined, secretId: string): string {
  const text = value?.trim();
  if (!text) throw new PermanentError(`secret ${secretId} has no string value (a binary secret cannot hold the API key)`);
  if (!text.startsWith('{')) return text;
  let fields: Record<string, unknown>;
  try {
    fields = JSON.parse(text) as Record<string, unknown>;
  } catch {
    throw new PermanentError(`secret ${secretId} starts like JSON but does not parse`);
  }
  for (const field of SECRET_FIELDS) {
    const key = fields[field];
    if (typeof key === 'string' && key.trim()) return key.trim();
  }
  throw new PermanentError(`secret ${secretId} is JSON without a ${SECRET_FIELDS.join(' / ')} field`);
}

/**
 * Runs `read` once and shares its result with every later caller. A failed read is forgotten, so the next
 * step tries again instead of failing for the life of the container.
 */
export function rememberOnce(read: () => Promise<string>): ApiKeySource {
  let pending: Promise<string> | undefined;
  return () => {
    pending ??= read().catch((error: unknown) => {
      pending = undefined;
      throw error;
    });
    return pending;
  };
}
