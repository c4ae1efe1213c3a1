import { InvalidInputError } from '../core/errors.ts';
import type { AwsResource } from './check-resources.ts';

const HOW_TO_NAME: Record<Exclude<AwsResource, 'table'>, string> = {
  bucket: '--bucket, BUCKET_NAME or --stack',
  queue: '--queue-url, QUEUE_URL or --stack',
};

/**
 * Stands in for a bucket or queue a command did not name because it does not expect to use it (`status`
 * reads the table alone). Should it be used after all (`show` of a run whose output was spilled to S3),
 * each of the adapter's methods rejects with a line naming what to set, where an adapter over an empty name
 * would fail with the SDK's own words about an invalid bucket or URL.
 */
export function unnamedResource<T extends object>(resource: Exclude<AwsResource, 'table'>, adapter: abstract new (...args: never[]) => T): T {
  const methods = new Set(Object.getOwnPropertyNames(adapter.prototype).filter((name) => name !== 'constructor'));
  const refuse = () => Promise.reject(new InvalidInputError(`this needs the ${resource}, and none is named: set ${HOW_TO_NAME[resource]}`));
  // Only the adapter's own methods refuse: anything else (then, toString, util.inspect's hook) is a plain
  // object's, so the stand-in is neither taken for a promise nor leaves a rejection behind when printed.
  return new Proxy({} as T, {
    get: (target, property, receiver) => (typeof property === 'string' && methods.has(property) ? refuse : Reflect.get(target, property, receiver)),
  });
}
