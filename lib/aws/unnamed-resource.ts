import { InvalidInputError } from '../core/errors.ts';
import type { AwsResource } from './check-resources.ts';

const HOW_TO_NAME: Record<Exclude<AwsResource, 'table'>, string> = {
  bucket: '--bucket, BUCKET_NAME or --stack',
  queue: '--queue-url, QUEUE_URL or --stack',
};

/**
 * Stands in for a bucket or queue a command did not name because it does not expect to use it (`status`
 * reads the table alone). Should it be used after all (`show` of a run whose output was spilled to S3),
 * every method rejects with a line naming what to set, where an adapter over an empty name would fail
 * with the SDK's own words about an invalid bucket or URL.
 */
export function unnamedResource<T extends object>(resource: Exclude<AwsResource, 'table'>): T {
  const refuse = () => Promise.reject(new InvalidInputError(`this needs the ${resource}, and none is named: set ${HOW_TO_NAME[resource]}`));
  return new Proxy({} as T, {
    // 'then' stays undefined so the stand-in is not taken for a promise when awaited or returned.
    get: (_target, property) => (property === 'then' ? undefined : refuse),
  });
}
