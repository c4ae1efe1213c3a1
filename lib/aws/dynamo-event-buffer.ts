import { PutCommand, QueryCommand, type DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { BlobStore, Clock, EventBuffer, RunEvent } from '../ports.ts';
import { systemClock } from '../ports.ts';
import { AttributeSpill, MissingSpilledValueError } from './attribute-spill.ts';
import { isConditionalCheckFailed } from './dynamo-errors.ts';
import { PK, SK, TTL_ATTRIBUTE, eventPk } from './table-layout.ts';

export const DEFAULT_EVENT_RETENTION_MS = 24 * 3600 * 1000;

/**
 * Kept events in the run table: one item per event id under its (type, key), so a redelivered event is
 * one conditional put that fails, and finding a wait's early events is one strongly consistent Query.
 * Payloads too large for an item go to S3 like any large value. TTL removes them after the window.
 */
export class DynamoEventBuffer implements EventBuffer {
  private readonly spill: AttributeSpill;

  constructor(private readonly options: { doc: DynamoDBDocumentClient; tableName: string; blobs: BlobStore; clock?: Clock; retentionMs?: number }) {
    this.spill = new AttributeSpill(options.blobs);
  }

  async put(event: RunEvent): Promise<boolean> {
    const payload = await this.spill.keep('payload', JSON.stringify(event.payload ?? null));
    const expiresAt = Math.ceil((event.receivedAt + (this.options.retentionMs ?? DEFAULT_EVENT_RETENTION_MS)) / 1000);
    try {
      await this.options.doc.send(new PutCommand({
        TableName: this.options.tableName,
        Item: { [PK]: eventPk(event.type, event.key), [SK]: event.id, receivedAt: event.receivedAt, ...payload, [TTL_ATTRIBUTE]: expiresAt },
        ConditionExpression: 'attribute_not_exists(#pk)', ExpressionAttributeNames: { '#pk': PK },
      }));
      return true;
    } catch (error) {
      if (isConditionalCheckFailed(error)) return false;
      throw error;
    }
  }

  async find(type: string, key: string, since: number): Promise<RunEvent[]> {
    const nowSeconds = (this.options.clock ?? systemClock).now() / 1000;
    const events: RunEvent[] = [];
    let start: Record<string, unknown> | undefined;
    do {
      const page = await this.options.doc.send(new QueryCommand({
        TableName: this.options.tableName, ConsistentRead: true,
        KeyConditionExpression: '#pk = :pk', FilterExpression: '#at >= :since AND #ttl > :now',
        ExpressionAttributeNames: { '#pk': PK, '#at': 'receivedAt', '#ttl': TTL_ATTRIBUTE },
        ExpressionAttributeValues: { ':pk': eventPk(type, key), ':since': since, ':now': nowSeconds },
        ...(start ? { ExclusiveStartKey: start } : {}),
      }));
      for (const item of page.Items ?? []) {
        const event: RunEvent = { id: String(item[SK]), type, key, payload: null, receivedAt: Number(item.receivedAt) };
        try {
          event.payload = JSON.parse((await this.spill.restore(item, 'payload')) ?? 'null') as unknown;
        } catch (error) {
          // Lost data, the same at every read: thrown, it failed every delivery of the wait that looked for
          // it, for good. Marked, it is passed over (lib/waits/drive.ts says so) and the wait goes on.
          if (!(error instanceof MissingSpilledValueError)) throw error;
          event.unreadable = error.message;
        }
        events.push(event);
      }
      start = page.LastEvaluatedKey;
    } while (start);
    return events.sort((a, b) => a.receivedAt - b.receivedAt || a.id.localeCompare(b.id));
  }
}
