import type { Clock, EventBuffer, RunEvent } from '../ports.ts';
import { systemClock } from '../ports.ts';
import { preparedOnce, type Db } from './database.ts';

export const DEFAULT_EVENT_RETENTION_MS = 24 * 3600 * 1000;

/** Events in the SQLite file, one row per type, key and event id, dropped after the retention window. */
export class SqliteEventBuffer implements EventBuffer {
  constructor(private readonly db: Db, private readonly options: { clock?: Clock; retentionMs?: number } = {}) {}

  async put(event: RunEvent): Promise<boolean> {
    const expiresAt = event.receivedAt + (this.options.retentionMs ?? DEFAULT_EVENT_RETENTION_MS);
    return preparedOnce(this.db)('INSERT INTO events (id, type_key, payload, received_at, expires_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (type_key, id) DO NOTHING')
      .run(event.id, typeKey(event.type, event.key), JSON.stringify(event.payload ?? null), event.receivedAt, expiresAt).changes > 0;
  }

  async find(type: string, key: string, since: number): Promise<RunEvent[]> {
    const now = (this.options.clock ?? systemClock).now();
    const rows = preparedOnce(this.db)('SELECT id, payload, received_at FROM events WHERE type_key = ? AND received_at >= ? AND expires_at > ? ORDER BY received_at, id')
      .all(typeKey(type, key), since, now) as { id: string; payload: string; received_at: number }[];
    return rows.map((r) => ({ id: r.id, type, key, payload: JSON.parse(r.payload) as unknown, receivedAt: r.received_at }));
  }

  prune(): number {
    return preparedOnce(this.db)('DELETE FROM events WHERE expires_at <= ?').run((this.options.clock ?? systemClock).now()).changes;
  }
}

const typeKey = (type: string, key: string): string => `${type}\n${key}`;
