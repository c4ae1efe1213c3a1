import { InvalidInputError } from '../../core/errors.ts';
import { DEFAULT_RETENTION_MS, daysToMs } from '../../core/retention.ts';
import { pruneLocal } from '../../local/prune.ts';
import { openBackend, type CliOptions } from '../context.ts';

/**
 * `prune [--older-than-days n]`: locally, drops checkpoint versions past the retention window (or older
 * than n days), the latest of every run kept, plus spent queue records, expired events and unreferenced
 * blobs. On AWS, DynamoDB TTL removes older versions; this sweeps the bucket's unreferenced blobs.
 */
export async function pruneCommand(options: CliOptions & { olderThanDays?: string }, out: (line: string) => void): Promise<number> {
  const olderThanMs = options.olderThanDays !== undefined ? daysToMs('--older-than-days', options.olderThanDays) : undefined;
  const runtime = await openBackend(options, ['table', 'bucket']);
  try {
    if (runtime.aws) {
      if (olderThanMs !== undefined) throw new InvalidInputError('--older-than-days is for the local backend: on AWS, DynamoDB TTL removes checkpoint versions past STEPWISE_RETENTION_DAYS');
      const { aws } = runtime;
      const { sweepBlobs } = await import('../../aws/blob-sweep.ts'); // the AWS SDK only when asked for
      const swept = await sweepBlobs({ doc: aws.clients.doc, s3: aws.clients.s3, tableName: aws.tableName, bucketName: aws.bucketName, blobs: aws.blobs });
      out(`swept ${swept.deleted} unreferenced blobs (${swept.referenced} referenced, ${swept.young} younger than a day kept); DynamoDB TTL removes older checkpoint versions`);
      return 0;
    }
    if (!runtime.local) throw new InvalidInputError('stepwise prune needs the local or the aws backend');
    const pruned = pruneLocal(runtime.local, olderThanMs !== undefined ? { olderThanMs } : {});
    // A version's window is fixed when it is written (its expiry, as DynamoDB's TTL on AWS): naming today's
    // STEPWISE_RETENTION_DAYS here said a lowered window had been applied to versions it had not touched.
    const which = olderThanMs !== undefined
      ? `older than ${olderThanMs / 86_400_000} days (the latest of every run kept)`
      : `past their retention window (the latest of every run kept; each keeps the window it was written with, STEPWISE_RETENTION_DAYS then or ${DEFAULT_RETENTION_MS / 86_400_000} days: --older-than-days n prunes by age)`;
    out(`pruned ${pruned.checkpoints} checkpoint versions ${which}, ${pruned.tombstones} queue tombstones, ${pruned.events} expired events, ${pruned.blobs} unreferenced blobs`);
    return 0;
  } finally {
    runtime.close();
  }
}
