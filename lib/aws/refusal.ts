/**
 * AWS answers that no retry mends, told by the error's name alone (no SDK import: the CLI's error line reads
 * it on every backend). The services' own messages are often bare ("The security token included in the
 * request is invalid.", S3's "Access Denied", a KMS key "that does not exist, does not exist in this region,
 * or you are not allowed to access") and name neither the service nor what to do.
 */
export type AwsRefusal = 'credentials' | 'permission' | 'kms';

/** Credentials the service does not take: expired, unknown, or signed with another secret. */
const CREDENTIALS = new Set([
  'ExpiredToken', 'ExpiredTokenException', 'UnrecognizedClientException', 'InvalidClientTokenId', 'InvalidAccessKeyId',
  'InvalidSignatureException', 'SignatureDoesNotMatch',
]);
const PERMISSION = new Set(['AccessDenied', 'AccessDeniedException']);

export function awsRefusal(error: unknown): AwsRefusal | undefined {
  const name = String((error as { name?: unknown } | undefined)?.name ?? '');
  if (CREDENTIALS.has(name)) return 'credentials';
  if (PERMISSION.has(name)) return 'permission';
  // SQS's KmsAccessDenied, KmsDisabled ...; S3's KMS.DisabledException ...; DynamoDB's and others' KMSAccessDeniedException.
  // KMS throttling passes, as any throttle does.
  if (/^(Kms[A-Z]|KMS)/.test(name) && !/Throttl/i.test(name)) return 'kms';
  return undefined;
}

/** What to do about a refusal, for the line that reports it. */
export function refusalFix(refusal: AwsRefusal): string {
  switch (refusal) {
    case 'credentials': return 'AWS did not accept the credentials: refresh them (aws sso login, a new session token) or check AWS_PROFILE, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY';
    case 'permission': return 'the AWS identity may not make this call: allow it in the identity\'s IAM policy (or the resource\'s policy)';
    case 'kms': return 'the KMS key that encrypts the table, queue or bucket is disabled, deleted or not usable by this identity: check the key\'s state and its key policy';
  }
}

/** A refusal and what to do about it, for a worker's step-error line; undefined for a fault that may pass. */
export function describeRefusal(error: unknown): { refused: AwsRefusal; fix: string } | undefined {
  const refused = awsRefusal(error);
  return refused ? { refused, fix: refusalFix(refused) } : undefined;
}
