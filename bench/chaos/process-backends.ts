/**
 * Where the chaos command's real worker processes keep their runs: one SQLite file (the embedded default),
 * or a table, a bucket and a FIFO queue of their own on DynamoDB Local and fauxqs (`stepwise worker
 * --backend aws`, as a worker outside Lambda runs). What the schedule needs of each: the CLI's flags, a
 * reader for the invariants, and the faults only one of them can take.
 */
import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { DeleteTableCommand } from '@aws-sdk/client-dynamodb';
import { DeleteQueueCommand } from '@aws-sdk/client-sqs';
import { createAwsClients } from '../../lib/aws/clients.ts';
import { ensureBucket, ensureQueue, ensureTable } from '../../lib/aws/provision.ts';
import { openAwsRuntime } from '../../lib/aws/runtime.ts';
import { isBusy } from '../../lib/local/database.ts';
import { openLocalRuntime } from '../../lib/local/runtime.ts';
import type { BlobStore, CheckpointStore } from '../../lib/ports.ts';

export type ProcessBackendKind = 'local' | 'aws';

export interface ProcessBackend {
  kind: ProcessBackendKind;
  /** The CLI flags that point `stepwise start` and `stepwise worker` at it. */
  args: string[];
  store: CheckpointStore;
  blobs: BlobStore;
  /** Runs of these still running or waiting. */
  unfinished(runIds: readonly string[]): Promise<number>;
  /** Holds the store unavailable for a while (SQLite: the file locked by another connection); absent where it cannot. */
  brownout?(ms: number): Promise<void>;
  /** Deliveries beyond each message's first, where the queue keeps that count after the ack (SQLite). */
  redeliveries?(): number;
  close(): Promise<void>;
}

export async function openProcessBackend(kind: ProcessBackendKind, dir: string, seed: number): Promise<ProcessBackend> {
  return kind === 'local' ? localBackend(join(dir, 'stepwise.db')) : awsBackend(seed);
}

function localBackend(dbPath: string): ProcessBackend {
  const runtime = openLocalRuntime({ dbPath });
  // A run's queue row is rewritten for each version it is sent, its receive count with it: the count each
  // (run, version) reached is kept beside it, by a trigger of this schedule's file only, as it is raised.
  runtime.db.exec(`CREATE TABLE IF NOT EXISTS chaos_receives (run_id TEXT NOT NULL, version INTEGER NOT NULL, receive_count INTEGER NOT NULL, PRIMARY KEY (run_id, version));
    CREATE TRIGGER IF NOT EXISTS chaos_count_receives AFTER UPDATE OF receive_count ON queue WHEN new.receive_count > 1 BEGIN
      INSERT INTO chaos_receives VALUES (new.run_id, new.version, new.receive_count) ON CONFLICT DO UPDATE SET receive_count = excluded.receive_count;
    END;`);
  return {
    kind: 'local', args: ['--db', dbPath], store: runtime.store, blobs: runtime.blobs,
    unfinished: async (runIds) => (runtime.db.prepare(`SELECT count(*) AS n FROM runs WHERE status IN ('running', 'waiting') AND run_id IN (${runIds.map(() => '?').join(', ')})`)
      .get(...runIds) as { n: number }).n,
    async brownout(ms) {
      // A worker stopped in the middle of a commit may hold the lock, and only this process's timer sends
      // it SIGCONT. SQLite's busy timeout would wait with the event loop blocked, so that timer could not
      // fire: the lock is tried without one, and retried between turns of the loop.
      const lock = new Database(dbPath, { timeout: 0 });
      for (const giveUp = Date.now() + 30_000; ;) {
        try { lock.exec('BEGIN IMMEDIATE'); break; } catch (err) {
          if (!isBusy(err) || Date.now() > giveUp) { lock.close(); throw err; }
          await new Promise((res) => setTimeout(res, 10));
        }
      }
      await new Promise((res) => setTimeout(res, ms));
      lock.exec('ROLLBACK');
      lock.close();
    },
    redeliveries: () => (runtime.db.prepare('SELECT coalesce(sum(receive_count - 1), 0) AS n FROM chaos_receives').get() as { n: number }).n,
    close: async () => runtime.close(),
  };
}

/** A schedule's own table, bucket and queue on the local servers (the environment points the SDK at them). */
async function awsBackend(seed: number): Promise<ProcessBackend> {
  const clients = createAwsClients();
  const name = `stepwise-chaos-proc-${seed.toString(36)}-${randomUUID().slice(0, 6)}`;
  const [, , urls] = await Promise.all([
    ensureTable(clients.dynamo, name), ensureBucket(clients.s3, name), ensureQueue(clients.sqs, name, { visibilityTimeoutSeconds: 1 }),
  ]);
  const runtime = openAwsRuntime({ tableName: name, bucketName: name, queueUrl: urls.queueUrl, clients });
  return {
    kind: 'aws', args: ['--backend', 'aws', '--table', name, '--bucket', name, '--queue-url', urls.queueUrl],
    store: runtime.store, blobs: runtime.blobs,
    async unfinished(runIds) {
      const states = await Promise.all(runIds.map((runId) => runtime.store.load(runId)));
      return states.filter((s) => !s || s.status === 'running' || s.status === 'waiting').length;
    },
    async close() {
      runtime.close();
      // The servers outlive the schedule: drop its table and queues.
      await Promise.all([
        clients.dynamo.send(new DeleteTableCommand({ TableName: name })),
        ...[urls.queueUrl, urls.dlqUrl].map((QueueUrl) => clients.sqs.send(new DeleteQueueCommand({ QueueUrl }))),
      ]).catch(() => undefined);
      clients.destroy();
    },
  };
}
