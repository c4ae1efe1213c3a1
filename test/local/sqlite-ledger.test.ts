import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { openDatabase } from '../../lib/local/database.ts';
import { SqliteLedger } from '../../lib/local/sqlite-ledger.ts';
import { idempotencyLedgerContract } from '../contract/idempotency-ledger-contract.ts';

const dir = mkdtempSync(join(tmpdir(), 'stepwise-ledger-'));
const db = openDatabase(join(dir, 'ledger.db'));
afterAll(() => { db.close(); rmSync(dir, { recursive: true, force: true }); });

idempotencyLedgerContract('SQLite', () => ({ ledger: (clock) => new SqliteLedger(db, clock) }));
