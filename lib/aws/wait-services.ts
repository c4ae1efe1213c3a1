import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { SESv2Client } from '@aws-sdk/client-sesv2';
import { TransientError, errorMessage } from '../core/errors.ts';
import { EMAIL_FROM_ENV, PUBLIC_URL_ENV } from '../settings.ts';
import type { WaitServices } from '../waits/services.ts';
import { SIGNING_KEY_SECRET_ENV, decodeKey, type SigningKeySource } from '../waits/signing-key.ts';
import { DynamoEventBuffer } from './dynamo-event-buffer.ts';
import type { AwsRuntime } from './runtime.ts';
import { SesNotifier } from './ses-notifier.ts';

/** Timers further out than this do not sit in SQS: the scheduled sweeper sends them when they come due. */
export const SQS_MAX_TIMER_MS = 15 * 60 * 1000;
export { EMAIL_FROM_ENV, PUBLIC_URL_ENV };

/**
 * Waits on AWS: approval emails through SES v2 from STEPWISE_EMAIL_FROM, links signed with the key in the
 * Secrets Manager secret STEPWISE_SIGNING_KEY_SECRET_ID and pointing at STEPWISE_PUBLIC_URL (the API
 * Gateway URL), events kept in the run table.
 */
export function awsWaitServices(runtime: AwsRuntime, env: NodeJS.ProcessEnv = process.env): WaitServices {
  const from = env[EMAIL_FROM_ENV]?.trim();
  const secretId = env[SIGNING_KEY_SECRET_ENV]?.trim();
  const publicUrl = env[PUBLIC_URL_ENV]?.trim();
  return {
    ...(from ? { notifier: new SesNotifier({ ses: new SESv2Client({}), from }) } : {}),
    ...(secretId ? { signingKey: secretSigningKey(secretId) } : {}),
    ...(publicUrl ? { publicUrl } : {}),
    events: new DynamoEventBuffer({ doc: runtime.clients.doc, tableName: runtime.tableName, blobs: runtime.blobs }),
    maxTimerMs: SQS_MAX_TIMER_MS,
  };
}

/** The signing key from a Secrets Manager secret (base64 text), read once per container. */
export function secretSigningKey(secretId: string, client: SecretsManagerClient = new SecretsManagerClient({})): SigningKeySource {
  let key: Promise<Buffer> | undefined;
  return () => {
    key ??= client.send(new GetSecretValueCommand({ SecretId: secretId })).then(
      (value) => decodeKey(value.SecretString ?? '', `secret ${secretId}`),
      (error: unknown) => {
        key = undefined;
        throw new TransientError(`cannot read the approval signing key from secret ${secretId}: ${errorMessage(error)}`, { cause: error });
      },
    );
    return key;
  };
}
