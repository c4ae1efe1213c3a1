import { createServer, type Server, type Socket } from 'node:net';
import { DescribeTableCommand } from '@aws-sdk/client-dynamodb';
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createAwsClients } from '../../lib/aws/clients.ts';

/**
 * A store that stops answering (a frozen DynamoDB, a half-open connection): a real TCP server that takes
 * each request and never replies. Every client's request must fail at its requestTimeout, not wait on:
 * a step, an API request or a CLI command would otherwise hang for good.
 */
let server: Server;
const sockets = new Set<Socket>();
let requests = 0;
let endpoint = '';

beforeAll(async () => {
  server = createServer((socket) => {
    sockets.add(socket);
    socket.once('data', () => { requests++; });
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  endpoint = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
});
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => server.close(resolve));
});
afterEach(() => {
  vi.unstubAllEnvs();
  vi.restoreAllMocks();
});

describe('the SDK clients against a store that never answers', () => {
  it('DynamoDB, SQS and S3 each fail with a TimeoutError after the request went out, and print no warning', { timeout: 60_000 }, async () => {
    for (const name of ['AWS_ENDPOINT_URL_DYNAMODB', 'AWS_ENDPOINT_URL_SQS', 'AWS_ENDPOINT_URL_S3']) vi.stubEnv(name, endpoint);
    vi.stubEnv('AWS_REGION', 'us-east-1');
    vi.stubEnv('AWS_ACCESS_KEY_ID', 'test');
    vi.stubEnv('AWS_SECRET_ACCESS_KEY', 'test');
    vi.stubEnv('AWS_MAX_ATTEMPTS', '1');
    const warn = vi.spyOn(console, 'warn');
    const clients = createAwsClients({ requestTimeoutMs: 300 });
    try {
      // Each call's failure is caught as it is made: they run at once.
      const failure = (call: Promise<unknown>) => call.then(() => undefined, (e: unknown) => e as Error);
      const calls: [string, Promise<Error | undefined>][] = [
        ['dynamodb', failure(clients.dynamo.send(new DescribeTableCommand({ TableName: 'runs' })))],
        ['sqs', failure(clients.sqs.send(new GetQueueAttributesCommand({ QueueUrl: `${endpoint}/000000000000/runs.fifo` })))],
        ['s3', failure(clients.s3.send(new GetObjectCommand({ Bucket: 'blobs', Key: 'k' })))],
      ];
      for (const [service, call] of calls) {
        const error = await call;
        expect(error, service).toBeInstanceOf(Error);
        expect(error!.name, service).toBe('TimeoutError');
        expect(error!.message, service).toContain('300 ms requestTimeout');
      }
      expect(requests).toBeGreaterThanOrEqual(3);
      expect(warn).not.toHaveBeenCalled();
    } finally {
      clients.destroy();
    }
  });
});
