import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { SESv2Client } from '@aws-sdk/client-sesv2';
import { InvalidInputError, TransientError, errorMessage } from '../core/errors.ts';
import type { Logger } from '../log.ts';
import type { Notifier } from '../ports.ts';
import { EMAIL_FROM_ENV, OUTBOX_ENV, PUBLIC_URL_ENV } from '../settings.ts';
import { rememberKey } from '../llm/remember-key.ts';
import { publicUrlOf } from '../waits/public-url.ts';
import type { WaitServices } from '../waits/services.ts';
import { SIGNING_KEY_FILE_ENV, SIGNING_KEY_SECRET_ENV, decodeKey, fileSigningKey, type SigningKeySource, type SigningKeys } from '../waits/signing-key.ts';
import { DynamoEventBuffer } from './dynamo-event-buffer.ts';
import type { AwsRuntime } from './runtime.ts';
import { SesNotifier } from './ses-notifier.ts';

/** Timers further out than this do not sit in SQS: the scheduled sweeper sends them when they come due. */
export const SQS_MAX_TIMER_MS = 15 * 60 * 1000;
export { EMAIL_FROM_ENV, PUBLIC_URL_ENV };

/**
 * Waits on AWS: approval emails through SES v2 from STEPWISE_EMAIL_FROM, links signed with the key in the
 * Secrets Manager secret STEPWISE_SIGNING_KEY_SECRET_ID and pointing at STEPWISE_PUBLIC_URL (the API
 * Gateway URL), events kept in the run table. Off AWS (a host of your own, `npm run local-aws`), the key
 * may be a file (STEPWISE_SIGNING_KEY_FILE) and the emails .eml files in a folder (STEPWISE_OUTBOX).
 */
export function awsWaitServices(runtime: AwsRuntime, env: NodeJS.ProcessEnv = process.env, options: AwsWaitOptions = {}): WaitServices {
  // Checked as the local backend checks it: a value with no scheme was pasted in front of every emailed link.
  const publicUrl = publicUrlOf(env);
  const notifier = awsNotifier(env, options.outbox);
  const signingKey = awsSigningKey(env, options.log);
  return {
    ...(notifier ? { notifier } : {}),
    ...(signingKey ? { signingKey } : {}),
    ...(publicUrl ? { publicUrl } : {}),
    events: new DynamoEventBuffer({ doc: runtime.clients.doc, tableName: runtime.tableName, blobs: runtime.blobs }),
    maxTimerMs: SQS_MAX_TIMER_MS,
  };
}

export interface AwsWaitOptions {
  /**
   * Makes the notifier that writes .eml files to STEPWISE_OUTBOX: given by the CLI, on a host of your own.
   * A Lambda function has no folder anyone reads, and leaving the outbox out keeps it from the worker's
   * bundle, which is held under 1 MB.
   */
  outbox?: (dir: string) => Notifier;
  /** Where a warning about the settings goes (a signing key file others can read). */
  log?: Logger;
}

/** One place the emails go, or none (an approval is then answered with `stepwise approve` or the API). */
function awsNotifier(env: NodeJS.ProcessEnv, outboxNotifier?: (dir: string) => Notifier): Notifier | undefined {
  const from = env[EMAIL_FROM_ENV]?.trim();
  const outbox = env[OUTBOX_ENV]?.trim();
  if (from && outbox) throw new InvalidInputError(`set one of ${EMAIL_FROM_ENV} (send with SES) and ${OUTBOX_ENV} (write .eml files), not both`);
  if (from) return new SesNotifier({ ses: new SESv2Client({}), from });
  if (!outbox) return undefined;
  if (!outboxNotifier) throw new InvalidInputError(`${OUTBOX_ENV} writes emails as files for a host of your own (the CLI's workers); in Lambda, set ${EMAIL_FROM_ENV} to send them with SES`);
  return outboxNotifier(outbox);
}

/** One key source, or none: two would sign with one and check with the other. */
function awsSigningKey(env: NodeJS.ProcessEnv, log?: Logger): SigningKeySource | undefined {
  const secretId = env[SIGNING_KEY_SECRET_ENV]?.trim();
  const file = env[SIGNING_KEY_FILE_ENV]?.trim();
  if (secretId && file) throw new InvalidInputError(`set one of ${SIGNING_KEY_SECRET_ENV} and ${SIGNING_KEY_FILE_ENV}, not both`);
  if (secretId) return secretSigningKey(secretId);
  return file ? fileSigningKey(file, log ? { warn: (fields, message) => log.warn(fields, message) } : {}) : undefined;
}

/**
 * How long a signing key read from its secret is used before it is read again. Read once per container, a
 * key put into the secret (a rotation) reached only new containers: for hours a warm worker signed links
 * with the old key that new API containers refused as "not issued by this deployment", and a warm API
 * refused the new workers' links. Now every container takes the new key within this time.
 */
export const SIGNING_KEY_REFRESH_MS = 5 * 60_000;

/**
 * The signing key from a Secrets Manager secret (base64 text), read once per container and again every
 * SIGNING_KEY_REFRESH_MS, as the Anthropic key is (rememberKey): a first read that fails is not remembered
 * (the next call tries again); a refresh that fails, or finds a value that is no key, keeps the key that
 * worked a little longer.
 */
export function secretSigningKey(
  secretId: string, client: SecretsManagerClient = new SecretsManagerClient({}), options: { refreshMs?: number; now?: () => number } = {},
): SigningKeySource {
  const where = `secret ${secretId}`;
  const text = rememberKey(async () => {
    let value;
    try {
      value = await client.send(new GetSecretValueCommand({ SecretId: secretId }));
    } catch (error) {
      throw new TransientError(`cannot read the approval signing key from secret ${secretId}: ${errorMessage(error)}`, { cause: error });
    }
    const secret = value.SecretString ?? '';
    // Refused as it is read, so that a refresh finding no key keeps the one that worked.
    decodeKey(secret, where);
    return secret;
  }, { refreshMs: options.refreshMs ?? SIGNING_KEY_REFRESH_MS, ...(options.now ? { now: options.now } : {}) });
  // The key a rotation replaced: Secrets Manager labels the value before the current one AWSPREVIOUS.
  // Links it signed still work until they expire; none yet (a secret never rotated), or none readable
  // now, only means links are checked with the current key alone.
  const previous = rememberKey(async () => {
    try {
      const value = await client.send(new GetSecretValueCommand({ SecretId: secretId, VersionStage: 'AWSPREVIOUS' }));
      return value.SecretString ?? '';
    } catch (error) {
      if ((error as { name?: string }).name === 'ResourceNotFoundException') return '';
      throw error;
    }
  }, { refreshMs: options.refreshMs ?? SIGNING_KEY_REFRESH_MS, ...(options.now ? { now: options.now } : {}) });
  return async (): Promise<SigningKeys> => {
    const signing = decodeKey(await text(), where);
    const before = await previous().catch(() => '');
    let replaced: Buffer | undefined;
    try {
      replaced = before ? decodeKey(before, `${where} (AWSPREVIOUS)`) : undefined;
    } catch {
      // A value before the first key (a placeholder the secret was made with) signed no link.
    }
    return { signing, accepted: replaced && !replaced.equals(signing) ? [signing, replaced] : [signing] };
  };
}
