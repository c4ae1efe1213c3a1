import Database from 'better-sqlite3';
import { accessSync, constants, existsSync, readFileSync, realpathSync, statSync, type Stats } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { InvalidInputError } from '../core/errors.ts';
import { makeDir } from '../make-dir.ts';
import { BUSY_TIMEOUT_MS } from './busy.ts';
import { damagedDatabaseHint, isDamaged } from './damaged.ts';
import { refuseMovedFile, rememberFile } from './moved-file.ts';
import { NewerLayoutError } from './newer-layout.ts';
import { markReadCopy } from './read-copy.ts';

// Where the stores and the queue have long taken it from.
export { isBusy } from './busy.ts';

export type Db = Database.Database;

/**
 * The layout of the tables this code reads and writes, stamped in the file's header (SQLite's user_version)
 * once the file is brought to it; files from before the stamp read 0. Bump it with every change to the
 * tables below (a column, a re-keyed table, an index older code would make again): older code's statements
 * fail on a newer layout mid-step, after the model and the tool ran (an insert that leaves a new NOT NULL
 * column empty), or misread its rows, so code refuses a file of a newer layout when it opens it instead.
 * 1: the first stamped; 2: the steps table keyed by run number and step (keyStepsByNumber).
 */
export const LAYOUT_VERSION = 2;

/** A run's checkpoint keys are its number times this, plus the version: 2^32 versions a run. */
const RUN_KEYS = 4294967296;
/** One past the highest version a run's key range holds. */
export const MAX_VERSIONS = RUN_KEYS;

/**
 * The checkpoints table. Its key is one integer, the run's number (runs.run_no) times 2^32 plus the
 * version (checkpointKey), in a rowid table: the newest run's next version is appended at the end of the
 * b-tree, and its step writes the last leaf, and the parent only when a new leaf begins. Keyed by (run_id,
 * version) WITHOUT ROWID, as older files were, a row was the key itself: interior pages held a few whole
 * rows each and split with the leaves, 2.86 WAL pages a step at 500 B outputs against 1.50 this way
 * (bench/step-pages.ts). A run with newer runs after it inserts inside the key range and splits leaves as
 * any keyed table does. run_id and version stay columns, for reading; every query finds a run's rows by
 * the key range (checkpointsOfRun).
 */
const CHECKPOINTS_TABLE = (name: string) => `CREATE TABLE IF NOT EXISTS ${name} (
  id              INTEGER PRIMARY KEY,
  -- The key's two halves again: a row's key can be checked, and an insert that names no run number
  -- (older code sharing the file, which it must not) fails instead of filing its row under another run.
  run_no          INTEGER NOT NULL,
  run_id          TEXT NOT NULL,
  version         INTEGER NOT NULL,
  step            INTEGER NOT NULL,
  status          TEXT NOT NULL,
  tool            TEXT,
  idempotency_key TEXT,
  worker_id       TEXT NOT NULL,
  code_version    TEXT NOT NULL,
  bytes           INTEGER NOT NULL,
  -- Before the head, so reading the records of a run's rows never walks a head's overflow pages.
  record          TEXT,
  head            TEXT NOT NULL,
  reason          TEXT,
  created_at      INTEGER NOT NULL,
  expires_at      INTEGER NOT NULL,
  CHECK (id = run_no * ${RUN_KEYS} + version)
)`;

/** Kept events: an id names one event of a type and key, as on DynamoDB (keyEventsByTypeKeyAndId). */
const EVENTS_TABLE = (name: string) => `CREATE TABLE IF NOT EXISTS ${name} (
  type_key    TEXT NOT NULL,
  id          TEXT NOT NULL,
  payload     TEXT NOT NULL,
  received_at INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL,
  PRIMARY KEY (type_key, id)
)`;

/**
 * The steps table, keyed as the checkpoints are, by one integer (stepKey: the run's number and the step),
 * in a rowid table. Keyed (run_id, step) WITHOUT ROWID, as layouts before 2 were, a row past about 1,000
 * bytes (an index b-tree's most on a leaf) took an overflow page of its own: a pruned version's record of
 * 1 to 4 KB, moved here from its checkpoint row, grew the file by a page, and pruning 5,000 versions of 1 KB
 * outputs took it from 9.9 to 23.3 MB. A rowid table keeps a row of up to about 4 KB on its leaf.
 */
const STEPS_TABLE = (name: string) => `CREATE TABLE IF NOT EXISTS ${name} (
  id       INTEGER PRIMARY KEY,
  run_no   INTEGER NOT NULL,
  run_id   TEXT NOT NULL,
  step     INTEGER NOT NULL,
  decision TEXT,
  record   TEXT,
  CHECK (id = run_no * ${RUN_KEYS} + step)
)`;

const SCHEMA = `
-- One row per run: what changes with its status. A running run's next steps are written to checkpoints
-- alone, so version, step and updated_at here are those of the run's last commit that changed its status
-- (exact for a run that is not running); a run's latest version is its newest checkpoints row.
CREATE TABLE IF NOT EXISTS runs (
  run_id     TEXT PRIMARY KEY,
  -- The run's number, given once when it is created: the high half of its checkpoint rows' keys.
  run_no     INTEGER,
  version    INTEGER NOT NULL,
  status     TEXT NOT NULL,
  step       INTEGER NOT NULL,
  agent      TEXT NOT NULL,
  reason     TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  -- Redeliveries that started the next step at version restarts_at (see CheckpointStore.addRestarts):
  -- they count for that version only, so a commit resets them without writing this row.
  restarts   INTEGER NOT NULL DEFAULT 0,
  restarts_at INTEGER,
  -- A cancel asked for (who, when, why), applied at the run's next step boundary; commits keep it.
  cancel_requested TEXT,
  -- The open wait of a waiting run, copied from its head by the same write (NULL otherwise): events find
  -- the runs waiting for them, and deadlines come due, through the indexes below.
  wait_id       TEXT,
  wait_event    TEXT,
  wait_deadline INTEGER
);
-- Runs by status. updated_at is indexed only for runs that are not running: a running run's every step
-- changes it, and an index holding it would cost each step's write a page (a run's last commit enters
-- it once). Listing running runs sorts them, which are as many as the work in flight.
CREATE INDEX IF NOT EXISTS runs_of_status ON runs (status);
CREATE INDEX IF NOT EXISTS runs_ended_by_update ON runs (status, updated_at) WHERE status <> 'running';


-- One row per version: the run head as written then, and the record of the step it appended. A running
-- run's step is this one insert: its key is the fence (each writer inserts the version after the newest,
-- which it checks is the one it read). Older rows expire after the retention window, their records moved
-- to steps first; the latest is never pruned.
${CHECKPOINTS_TABLE('checkpoints')};

-- One row per step, written once: the decision recorded before a side-effecting tool runs. The records of
-- a fork's first steps, of checkpoint rows since pruned, and of files written by older code are here too.
${STEPS_TABLE('steps')};

-- The summary of each condensed block of a run (lib/core/condensed.ts), by its last step, written once
-- by the checkpoint that condensed it. A resume reads these and the records after them.
CREATE TABLE IF NOT EXISTS summaries (
  run_id    TEXT NOT NULL,
  last_step INTEGER NOT NULL,
  summary   TEXT NOT NULL,
  PRIMARY KEY (run_id, last_step)
) WITHOUT ROWID;

-- bytes: the blob's own length; data as stored, compressed when encoding says so (NULL: as given).
CREATE TABLE IF NOT EXISTS blobs (
  ref        TEXT PRIMARY KEY,
  bytes      INTEGER NOT NULL,
  data       BLOB NOT NULL,
  created_at INTEGER NOT NULL,
  encoding   TEXT
);

-- Events kept for a window, so one that arrives before its wait begins is matched when it does.
${EVENTS_TABLE('events')};
CREATE INDEX IF NOT EXISTS events_by_type_key ON events (type_key, received_at);

CREATE TABLE IF NOT EXISTS ledger (
  key         TEXT PRIMARY KEY,
  args_hash   TEXT NOT NULL,
  status      TEXT NOT NULL,
  result      TEXT,
  lease_until INTEGER NOT NULL,
  owner       TEXT,
  updated_at  INTEGER NOT NULL,
  format      INTEGER,
  machine_boot  TEXT,
  machine_until INTEGER,
  machine_owner TEXT
);

-- The local queue: one row per run (dedup_key is its id), its message for the newest version sent, which
-- a send for a newer version rewrites in place; a send for this version or an older one is a no-op. An
-- acked row stays a day as the tombstone that recognises late duplicates. agent is the run's agent (NULL
-- for a message of no known run): a worker receives only its agent's messages. created_at is when
-- visible_at was last written (every write of it writes both), so a row whose created_at is ahead of now
-- was written before the clock stepped back (SqliteQueue.rebaseStepped).
CREATE TABLE IF NOT EXISTS queue (
  id            INTEGER PRIMARY KEY,
  dedup_key     TEXT NOT NULL UNIQUE,
  run_id        TEXT NOT NULL,
  agent         TEXT,
  version       INTEGER,
  body          TEXT NOT NULL,
  visible_at    INTEGER NOT NULL,
  receive_count INTEGER NOT NULL DEFAULT 0,
  receipt       TEXT,
  acked_at      INTEGER,
  created_at    INTEGER NOT NULL
);
-- Live messages only: an ack takes a message out of it, so it stays as small as the work in flight and
-- a step's send, receive and ack touch the same page of it (acked tombstones are only ever pruned).
CREATE INDEX IF NOT EXISTS queue_live ON queue (visible_at) WHERE acked_at IS NULL;
`;

/**
 * The key of a checkpoint row, from SQL expressions of its run's number and its version. CAST: a bound
 * JavaScript number arrives as a REAL, whose product would lose the version past 2^53.
 */
export const checkpointKey = (runNo: string, version: string): string => `(CAST(${runNo} AS INTEGER) * ${RUN_KEYS} + CAST(${version} AS INTEGER))`;

/** The steps table's key of a run's step (SQL expressions): as checkpointKey, the run's number and the step. */
export const stepKey = checkpointKey;

/** The condition on `alias`'s key that selects the steps rows of the run numbered `runNo` (as checkpointsOfRun). */
export const stepsOfRun = (alias: string, runNo: string): string => checkpointsOfRun(alias, runNo);

/** The condition on `alias`'s key that selects the checkpoint rows of the run numbered `runNo`: a range of the table's own b-tree. */
export const checkpointsOfRun = (alias: string, runNo: string): string => `${alias}.id BETWEEN ${runNo} * ${RUN_KEYS} AND ${runNo} * ${RUN_KEYS} + ${RUN_KEYS - 1}`;

/**
 * The key of the newest checkpoint row of the run numbered `runNo` (an SQL expression): the run's latest
 * version is there (a running run's steps do not write the runs row). Every reader and the commit's
 * fence take it from here.
 */
export const newestCheckpointOf = (runNo: string): string => `(SELECT n.id FROM checkpoints n WHERE ${checkpointsOfRun('n', runNo)} ORDER BY n.id DESC LIMIT 1)`;

/** The latest version of the run numbered `runNo` (an SQL expression), from its newest checkpoint row. */
export const latestVersionOf = (runNo: string): string => `(SELECT n.version FROM checkpoints n WHERE ${checkpointsOfRun('n', runNo)} ORDER BY n.id DESC LIMIT 1)`;

/**
 * The size a -wal is cut back to once a WAL checkpoint has copied all of it. Above what steps leave it at between
 * SQLite's automatic WAL checkpoints (1,000 pages, 4.4 MB under busy workers), so a steady -wal is never cut
 * and its commits keep overwriting pages the file already has.
 */
export const WAL_SIZE_LIMIT_BYTES = 16 * 2 ** 20;

/** A statement by its text. */
export type Prepare = (text: string) => Database.Statement;

const prepared = new WeakMap<Db, Prepare>();

/** The connection's statements, each prepared once and kept: preparing is a large share of a small write's cost. */
export function preparedOnce(db: Db): Prepare {
  let prepare = prepared.get(db);
  if (!prepare) {
    const statements = new Map<string, Database.Statement>();
    prepared.set(db, (prepare = (text) => {
      let statement = statements.get(text);
      if (!statement) statements.set(text, (statement = db.prepare(text)));
      return statement;
    }));
  }
  return prepare;
}

/**
 * Opens (and creates) the stepwise database: WAL, waits on other processes' locks.
 * `durability: 'full'` (checkpoints, the ledger) fsyncs every commit, so an acknowledged write survives a
 * power cut. `'process'` (the queue) skips the fsync: its commits survive any process crash, and a power
 * cut can only drop the newest ones, in order (the WAL is replayed as a prefix). A dropped send is then
 * dropped with its later ack, so the message before it is delivered again and re-drives the run; a
 * dropped ack or receive is a duplicate delivery, which the version check makes a no-op. Blobs use it too:
 * a dropped blob is dropped with the checkpoint written after it that refers to it.
 */
export function openDatabase(path: string, durability: 'full' | 'process' = 'full'): Db {
  const db = openFile(path);
  try {
    refuseNewerLayout(db, path);
  } catch (error) {
    db.close();
    throw error;
  }
  db.pragma(durability === 'full' ? 'synchronous = FULL' : 'synchronous = NORMAL');
  // Several worker processes share the file; a writer waits for the lock instead of failing.
  db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
  // A worker keeps the file open for weeks, so SQLite's removal of the -wal at the last close never comes:
  // without a limit the -wal kept the largest size it ever reached (a reader holding a snapshot while
  // workers ran, a step's large output) until every process on the file stopped. With it, the commit that
  // starts the -wal again, once a WAL checkpoint has copied all of it into the file, cuts it back to this size.
  db.pragma(`journal_size_limit = ${WAL_SIZE_LIMIT_BYTES}`);
  try {
    bringToLayout(db, path);
    // Once a runtime: its queue's connection ('process') opens the same file just after this one.
    if (durability === 'full') refuseReadOnly(db);
  } catch (error) {
    db.close();
    throw error;
  }
  return db;
}

/**
 * A file this user may not write (its mode, a read-only mount) is opened by SQLite read-only without a
 * word, and a file already at this layout needs no write to open: `init` said "ready", `serve` started
 * and answered each approval with a 500, a worker failed at its first step. A write begun and rolled back
 * (the layout stamp, set to what it is) finds it at the open instead, as SQLITE_READONLY, which the CLI
 * names (exit code 2). It takes the write lock for a moment, as any step's commit does.
 */
function refuseReadOnly(db: Db): void {
  db.exec('BEGIN IMMEDIATE');
  try {
    db.pragma(`user_version = ${layoutOf(db)}`);
  } finally {
    db.exec('ROLLBACK');
  }
}

/** The largest older file a command that only reads copies into memory (openDatabaseToRead). */
export const MAX_READ_COPY_BYTES = 1024 * 2 ** 20;

/**
 * The file for a command that only reads (status, history, show, drift): as it is when it has this layout,
 * else a copy of it in memory brought to this layout. Bringing the file itself forward would do it for every
 * process on it, and the older release's workers still on it (drift is run before a deploy, while they
 * are) would then fail every step's checkpoint. Only queries: a write is refused (query_only), not lost.
 */
export function openDatabaseToRead(path: string, maxCopyBytes = MAX_READ_COPY_BYTES): Db {
  // In the journal mode it has: a backup (rollback mode) made read-only, or on read-only storage, is read
  // as it is, where switching it to WAL, a write, was refused.
  let file: Db;
  try {
    file = openFile(path, { wal: false });
  } catch (error) {
    const copy = copyOfUnopenableWalFile(path, maxCopyBytes, error);
    if (!copy) throw error;
    file = copy;
  }
  let image: Buffer;
  try {
    file.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    refuseNewerLayout(file, path);
    if (layoutOf(file) === LAYOUT_VERSION) {
      file.pragma('query_only = ON');
      return file;
    }
    // The copy is the whole file, blobs and all: past the limit, a read would take more memory than it should.
    const pages = file.pragma('page_count', { simple: true }) as number;
    const pageSize = file.pragma('page_size', { simple: true }) as number;
    if (pages * pageSize > maxCopyBytes) {
      throw new InvalidInputError(`the database ${path} has an older layout, which this release reads from a copy in memory, and at ${Math.round(pages * pageSize / 2 ** 20)} MB it is too large to copy; once the older release's workers are stopped, a worker of this release brings the file to this layout`);
    }
    image = file.serialize();
  } catch (error) {
    file.close();
    throw error;
  }
  file.close();
  // The image's header says WAL (bytes 18 and 19, its write and read versions), which a database in memory
  // cannot be; SQLite refuses to open it so. The rollback journal's 1 is what it can be.
  image[18] = 1;
  image[19] = 1;
  const copy = new Database(image);
  markReadCopy(copy, 'older-layout');
  bringToLayout(copy, path);
  copy.pragma('query_only = ON');
  return copy;
}

/**
 * A WAL file in a directory this user may not write (a read-only mount, a backup volume, a directory of
 * another user's), with no -shm beside it: SQLite reads a WAL file only through its -shm, which it makes
 * beside the file, so it refuses to open it at all ("unable to open database file"), where the README says
 * the commands that only read still read it. Every process that had it open has closed it (the -wal goes
 * with the last), so the file alone is the database: read into memory, as an older layout's is. A -wal
 * left beside it (a process killed) holds commits the file has not: refused, as before.
 */
function copyOfUnopenableWalFile(path: string, maxCopyBytes: number, error: unknown): Db | undefined {
  // CANTOPEN, wrapped by openFile, where the file could be written (root on a read-only mount); else
  // READONLY_DIRECTORY, SQLite's own, as the first read finds it.
  const code = (error as { code?: unknown }).code;
  const cause = (error as { cause?: { code?: unknown } }).cause?.code;
  if (!(cause === 'SQLITE_CANTOPEN' || code === 'SQLITE_READONLY_DIRECTORY') || path === ':memory:') return undefined;
  let image: Buffer;
  try {
    const stat = statSync(path);
    if (!stat.isFile() || existsSync(`${path}-wal`) || existsSync(`${path}-shm`)) return undefined;
    try {
      accessSync(dirname(path), constants.W_OK);
      return undefined;
    } catch {
      // Not writable: the -shm cannot be made, which is why SQLite refused.
    }
    if (stat.size > maxCopyBytes) {
      throw new InvalidInputError(`the database ${path} is in a directory this user may not write, where SQLite cannot make the -shm file it reads it through, and at ${Math.round(stat.size / 2 ** 20)} MB it is too large to read from a copy in memory: give write access to the directory, or copy the file to one this user may write`);
    }
    image = readFileSync(path);
  } catch (reason) {
    if (reason instanceof InvalidInputError) throw reason;
    return undefined;
  }
  // Only a WAL file (bytes 18 and 19, its write and read versions, 2): a file in another mode needs no -shm.
  if (image.length < 100 || image[18] !== 2 || image[19] !== 2) return undefined;
  image[18] = 1;
  image[19] = 1;
  const copy = new Database(image);
  markReadCopy(copy, 'unwritable-directory');
  return copy;
}

/** The tables made, and those of older code brought to this layout, which is then stamped. */
function bringToLayout(db: Db, path: string): void {
  db.exec(SCHEMA);
  // Indexes of older code that the ones above replace: they cost every step a page more.
  for (const name of REPLACED_INDEXES) {
    if (db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?").get(name)) db.exec(`DROP INDEX IF EXISTS ${name}`);
  }
  addMissingColumns(db);
  keyCheckpointsByNumber(db);
  keyStepsByNumber(db);
  keyEventsByTypeKeyAndId(db);
  db.exec(INDEXES_ON_ADDED_COLUMNS);
  stampLayout(db, path);
}

const layoutOf = (db: Db): number => db.pragma('user_version', { simple: true }) as number;

/**
 * A file a newer release has brought to its layout is refused before anything is written to it (no table
 * made, no index dropped): the run is that release's to work. A user error (exit code 2), naming both.
 */
function refuseNewerLayout(db: Db, path: string): void {
  const layout = layoutOf(db);
  if (layout <= LAYOUT_VERSION) return;
  throw new NewerLayoutError(`the database ${path} has layout ${layout}, written by a newer stepwise release; this one reads layouts up to ${LAYOUT_VERSION}: work and read it with that release or a newer one (one release at a time)`);
}

/**
 * The layout checked again under each write lock. A worker checks it when it opens the file, and runs for
 * weeks: a newer release's first process brings the file forward under it (its workers started before the
 * old ones were stopped), and the old worker's writes then went on into tables it no longer knows. The
 * layout 1 release's did so: each step called its model, then failed its decision's insert (NOT NULL
 * steps.run_no), and was tried again, for good. A header field read in the transaction already begun
 * (under a microsecond, against a step's 60).
 */
export function refuseLayoutChangedUnder(db: Db): void {
  const layout = (preparedOnce(db)('PRAGMA user_version').get() as { user_version: number }).user_version;
  if (layout <= LAYOUT_VERSION) return;
  throw new NewerLayoutError(`the database ${db.name} was brought to layout ${layout} by a newer stepwise release while this process had it open; this one reads layouts up to ${LAYOUT_VERSION}, so it writes nothing more to it (this write was not kept): stop this release's workers, and work the file with that release or a newer one`);
}

/** The file brought to this layout says so, under the write lock (another process may be opening it too). */
function stampLayout(db: Db, path: string): void {
  if (layoutOf(db) === LAYOUT_VERSION) return;
  immediate(db, () => {
    refuseNewerLayout(db, path);
    if (layoutOf(db) < LAYOUT_VERSION) db.pragma(`user_version = ${LAYOUT_VERSION}`);
  });
}

/**
 * The file, in WAL mode. A path that cannot hold a database (its directory cannot be made, a directory, a
 * file of something else, a damaged file) is the user's to fix: one line that names it (exit code 2 from the CLI), not
 * SQLite's "unable to open database file" alone. `wal: false` leaves the file in the journal mode it has
 * (a file a worker opened is in WAL already, and stays so).
 */
function openFile(path: string, { wal = true } = {}): Db {
  // SQLite opens "" as a private temporary database, deleted when it closes: every run started in it was lost
  // when the program ended, with nothing said (an unset variable passed as the path).
  if (path === '') throw new InvalidInputError(`the database path is empty (an unset variable?): SQLite would open a temporary database, deleted on close, and every run in it would be lost; give a file's path, or ':memory:' for one in memory`);
  let db: Db | undefined;
  try {
    if (path !== ':memory:') makeDir(dirname(path));
    db = new Database(path);
    if (path !== ':memory:') rememberFile(db, path);
    // Before anything is written, the journal mode included: the file may be another application's.
    refuseOthersTables(db);
    if (wal) db.pragma('journal_mode = WAL');
    return db;
  } catch (error) {
    db?.close();
    const code = (error as { code?: unknown }).code;
    // A file cut short or overwritten in part: its first read, here, finds it (SQLite's words name neither
    // the file nor that a retry cannot help).
    if (isDamaged(error)) throw new InvalidInputError(`cannot open the database ${path}: ${(error as Error).message}: ${damagedDatabaseHint('the file', path)}`, { cause: error });
    const unusable = !(error instanceof Database.SqliteError) || code === 'SQLITE_CANTOPEN' || code === 'SQLITE_NOTADB';
    if (!unusable) throw error;
    const why = code === 'SQLITE_CANTOPEN' ? whyCannotOpen(path) : undefined;
    throw new InvalidInputError(`cannot open the database ${path}: ${(error as Error).message}${why ? `: ${why}` : ''}`, { cause: error });
  }
}

/** The longest full path, in bytes, SQLite opens a file at: its journal's name (the path and -journal) must fit in 512. */
export const MAX_SQLITE_PATH_BYTES = 504;

/**
 * What SQLite's "unable to open database file" does not say, which sent users looking at the wrong thing:
 * a full path past SQLite's limit (a deep working directory under the default relative path: Node makes
 * every directory of it, SQLite opens none), a file this user may not read or write (made under umask 077
 * by another user), or a directory at the path.
 */
function whyCannotOpen(path: string): string | undefined {
  let full = resolve(path);
  try {
    // SQLite follows symlinks, so the length that counts is the target's.
    full = join(realpathSync(dirname(full)), basename(full));
  } catch {
    // The directory is not there or not readable: the checks below say which.
  }
  const bytes = Buffer.byteLength(full);
  if (bytes > MAX_SQLITE_PATH_BYTES) return `its full path, ${bytes} bytes, is longer than the ${MAX_SQLITE_PATH_BYTES} SQLite can open: pick a shorter --db`;
  let stat: Stats | undefined;
  try {
    stat = statSync(path, { throwIfNoEntry: false });
    if (stat?.isDirectory()) return 'it is a directory: give the path of a file in it';
    accessSync(stat ? path : dirname(path), stat ? constants.R_OK | constants.W_OK : constants.W_OK | constants.X_OK);
  } catch (error) {
    const refused = (error as NodeJS.ErrnoException).code === 'EACCES' || (error as NodeJS.ErrnoException).code === 'EPERM';
    if (refused) return stat
      ? `this user may not read and write it (mode ${(stat.mode & 0o777).toString(8)}, owner uid ${stat.uid}): give this user read and write access to it, or run as its owner`
      : `this user may not make a file in ${dirname(path)}: give write access to it, or pick another --db`;
  }
  return undefined;
}

/**
 * Columns each of stepwise's tables has had in every release. A table of one of these names without them
 * is another application's, in a file it shares (an app's own `queue` or `ledger`): opening it as ours
 * created our tables beside it and then failed on it ("no such column: visible_at"), or added our columns
 * to it and took it for the idempotency ledger.
 */
const OWN_COLUMNS: Record<string, readonly string[]> = {
  runs: ['run_id', 'version', 'status', 'step', 'agent'],
  checkpoints: ['run_id', 'version', 'step', 'status', 'head'],
  steps: ['run_id', 'step', 'decision', 'record'],
  summaries: ['run_id', 'last_step', 'summary'],
  blobs: ['ref', 'bytes', 'data'],
  events: ['type_key', 'id', 'payload', 'received_at'],
  ledger: ['key', 'args_hash', 'status', 'lease_until'],
  queue: ['dedup_key', 'run_id', 'body', 'visible_at'],
};

/** Refuses a file holding a table of one of stepwise's names that is not stepwise's (OWN_COLUMNS). */
function refuseOthersTables(db: Db): void {
  for (const [table, own] of Object.entries(OWN_COLUMNS)) {
    const columns = new Set((db.prepare('SELECT name FROM pragma_table_info(?)').all(table) as { name: string }[]).map((c) => c.name));
    const missing = own.filter((column) => !columns.has(column));
    if (columns.size && missing.length) {
      throw new InvalidInputError(`its table ${table} is not stepwise's (no ${missing.join(', ')}): the file is another application's, which stepwise would change; pick another --db`);
    }
  }
}

/** runs (status, updated_at), rewritten by every step; queue (acked_at, visible_at), holding every tombstone. */
const REPLACED_INDEXES = ['runs_by_status', 'queue_ready'];

/**
 * Columns added after a file may have been created by older code. Each is added on open under the write
 * lock and checked again inside it, since several processes open the same file; `then` runs once, with it.
 */
const ADDED_COLUMNS: { table: string; column: string; type: string; then?: string }[] = [
  // Claims got owners: old in-progress rows have none and simply expire.
  { table: 'ledger', column: 'owner', type: 'TEXT' },
  // The ledger record's format (RECORD_FORMATS.ledger); NULL is format 1.
  { table: 'ledger', column: 'format', type: 'INTEGER' },
  // A claim's lease on the machine's monotonic clock (SqliteLedger): the boot it counts from, its end, and
  // the owner it was written for (older code's takeover changes the owner, not these, so it reads as unset).
  { table: 'ledger', column: 'machine_boot', type: 'TEXT' },
  { table: 'ledger', column: 'machine_until', type: 'INTEGER' },
  { table: 'ledger', column: 'machine_owner', type: 'TEXT' },
  // Redeliveries that started the next step at the run's version (CheckpointStore.addRestarts).
  { table: 'runs', column: 'restarts', type: 'INTEGER NOT NULL DEFAULT 0' },
  // Restarts count for one version (older code reset them at each commit, which wrote runs.version).
  { table: 'runs', column: 'restarts_at', type: 'INTEGER', then: 'UPDATE runs SET restarts_at = version' },
  // Step records are written in the checkpoint row that appends them (older code wrote them to steps).
  { table: 'checkpoints', column: 'record', type: 'TEXT' },
  // Waits: the open wait of a waiting run, indexed below.
  { table: 'runs', column: 'wait_id', type: 'TEXT' },
  { table: 'runs', column: 'wait_event', type: 'TEXT' },
  { table: 'runs', column: 'wait_deadline', type: 'INTEGER' },
  // Cancelling a running run at its next step boundary (CheckpointStore.requestCancel).
  { table: 'runs', column: 'cancel_requested', type: 'TEXT' },
  // Runs got numbers, the high half of their checkpoint keys: an older file's runs take their rowids,
  // unique and stable while the column is filled (the checkpoints are re-keyed by them next).
  { table: 'runs', column: 'run_no', type: 'INTEGER', then: 'UPDATE runs SET run_no = rowid' },
  // Blobs are compressed when that saves space (lib/blob-compression.ts); older rows are as given.
  { table: 'blobs', column: 'encoding', type: 'TEXT' },
  // The queue learned agents: tag the waiting messages with their run's agent.
  {
    table: 'queue', column: 'agent', type: 'TEXT',
    then: 'UPDATE queue SET agent = (SELECT agent FROM runs WHERE runs.run_id = queue.run_id) WHERE acked_at IS NULL',
  },
  // One queue row per run (older code wrote one per version, keyed <run>/v<version>): each run keeps its
  // live row of the newest version (else its newest tombstone), keyed by its id. A live row of an older
  // version is stale: the newer one was sent after that version's checkpoint.
  {
    table: 'queue', column: 'version', type: 'INTEGER',
    then: `UPDATE queue SET version = json_extract(body, '$.version') WHERE run_id <> '' AND json_valid(body);
      DELETE FROM queue WHERE run_id <> '' AND id NOT IN (SELECT id FROM (SELECT id, row_number() OVER (
        PARTITION BY run_id ORDER BY acked_at IS NULL DESC, version DESC, id DESC) AS n FROM queue WHERE run_id <> '') WHERE n = 1);
      UPDATE queue SET dedup_key = run_id WHERE run_id <> ''`,
  },
];

/** Indexes on added columns: created after the columns exist, in files old and new. */
const INDEXES_ON_ADDED_COLUMNS = `
CREATE UNIQUE INDEX IF NOT EXISTS runs_by_number ON runs (run_no);
CREATE INDEX IF NOT EXISTS runs_by_wait_event ON runs (wait_event) WHERE wait_event IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_by_wait_deadline ON runs (wait_deadline) WHERE wait_deadline IS NOT NULL;
`;

function addMissingColumns(db: Db): void {
  for (const { table, column, type, then } of ADDED_COLUMNS) {
    const has = () => db.prepare(`SELECT 1 FROM pragma_table_info('${table}') WHERE name = ?`).get(column) !== undefined;
    if (has()) continue;
    immediate(db, () => {
      if (has()) return;
      db.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${type}`);
      if (then) db.exec(then);
    });
  }
}

/** An older file's checkpoints, keyed by (run_id, version) WITHOUT ROWID, copied once into the table keyed by checkpointKey. */
function keyCheckpointsByNumber(db: Db): void {
  keyByRunNumber(db, 'checkpoints', 'checkpoint', CHECKPOINTS_TABLE, `
    INSERT INTO checkpoints_keyed (id, run_no, run_id, version, step, status, tool, idempotency_key, worker_id, code_version, bytes, record, head, reason, created_at, expires_at)
      SELECT ${checkpointKey('r.run_no', 'c.version')}, r.run_no, c.run_id, c.version, c.step, c.status, c.tool, c.idempotency_key, c.worker_id, c.code_version, c.bytes, c.record, c.head, c.reason, c.created_at, c.expires_at
      FROM checkpoints c JOIN runs r ON r.run_id = c.run_id ORDER BY r.run_no, c.version`);
}

/**
 * A file of layout 1's steps, keyed (run_id, step) WITHOUT ROWID, copied once into the table keyed by
 * stepKey (STEPS_TABLE says why), as the checkpoints were. After keyCheckpointsByNumber: every run has
 * its number by then.
 */
function keyStepsByNumber(db: Db): void {
  keyByRunNumber(db, 'steps', 'step', STEPS_TABLE, `
    INSERT INTO steps_keyed (id, run_no, run_id, step, decision, record)
      SELECT ${stepKey('r.run_no', 's.step')}, r.run_no, s.run_id, s.step, s.decision, s.record
      FROM steps s JOIN runs r ON r.run_id = s.run_id ORDER BY r.run_no, s.step`);
}

/**
 * `table` of an older file, keyed by run_id WITHOUT ROWID, copied once by `copy` into `<table>_keyed`,
 * which `create` makes keyed by the run's number, then put in its place: under the write lock and checked
 * again inside it (several processes open one file). A row of no run has no number to be keyed by; no
 * release wrote one, and the copy refuses rather than drop it.
 */
function keyByRunNumber(db: Db, table: 'checkpoints' | 'steps', row: string, create: (name: string) => string, copy: string): void {
  const keyed = () => db.prepare(`SELECT 1 FROM pragma_table_info('${table}') WHERE name = 'id'`).get() !== undefined;
  if (keyed()) return;
  immediate(db, () => {
    if (keyed()) return;
    const orphans = db.prepare(`SELECT count(*) AS n FROM ${table} t WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = t.run_id)`).get() as { n: number };
    if (orphans.n) throw new Error(`stepwise: ${orphans.n} ${row} rows of runs this file has no runs row for; moving them to the new layout would lose them. Open this file with the release that wrote it.`);
    db.exec(`${create(`${table}_keyed`)};${copy};
      DROP TABLE ${table};
      ALTER TABLE ${table}_keyed RENAME TO ${table};`);
  });
}

/**
 * An older file's events, keyed by their id alone, copied once into the table keyed by (type_key, id), as
 * DynamoDB keys them: an id reused under another type or key is an event of its own, where the older key
 * dropped it as "seen before". Under the write lock and checked again inside it (several processes open
 * one file).
 */
function keyEventsByTypeKeyAndId(db: Db): void {
  const keyed = () => (db.prepare("SELECT pk FROM pragma_table_info('events') WHERE name = 'type_key'").get() as { pk: number }).pk > 0;
  if (keyed()) return;
  immediate(db, () => {
    if (keyed()) return;
    db.exec(`${EVENTS_TABLE('events_keyed')};
      INSERT INTO events_keyed (type_key, id, payload, received_at, expires_at) SELECT type_key, id, payload, received_at, expires_at FROM events;
      DROP TABLE events;
      ALTER TABLE events_keyed RENAME TO events;
      CREATE INDEX IF NOT EXISTS events_by_type_key ON events (type_key, received_at);`);
  });
}

/**
 * One transaction function per connection, given the work to do: better-sqlite3 builds four wrapper
 * functions for every transaction() call, a measurable share of a step's CPU when made per write.
 */
const runners = new WeakMap<Db, Database.Transaction<(fn: () => unknown) => unknown>>();

function runner(db: Db): Database.Transaction<(fn: () => unknown) => unknown> {
  let run = runners.get(db);
  if (!run) runners.set(db, (run = db.transaction((fn: () => unknown) => fn())));
  return run;
}


/**
 * BEGIN IMMEDIATE: take the write lock up front, so a read-then-write cannot be raced by another process.
 * Under it, the file is checked to be the one at the path still, at most every MOVED_FILE_CHECK_MS: a
 * checkpoint written to a file deleted or replaced under this connection would be lost (moved-file.ts), and
 * is refused, nothing written. A step's decision and the ledger's claim check each time, before an effect
 * runs. The file's layout is checked each time too (refuseLayoutChangedUnder).
 */
export function immediate<T>(db: Db, fn: () => T): T {
  return runner(db).immediate(() => {
    refuseMovedFile(db);
    refuseLayoutChangedUnder(db);
    return fn();
  }) as T;
}

/** A read transaction (BEGIN DEFERRED): the statements in it see one moment of the file. */
export function reading<T>(db: Db, fn: () => T): T {
  return runner(db).deferred(fn) as T;
}
