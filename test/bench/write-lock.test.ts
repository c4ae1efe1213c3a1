import { spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDb } from '../support/harness.ts';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));

/**
 * A process with bench/write-lock.mjs preloaded: on "go" it makes three immediate transactions, then one of
 * each other form, which the figures must leave out, and exits.
 */
const TIMED = `
const Database = require(${JSON.stringify(join(ROOT, 'node_modules/better-sqlite3'))});
const db = new Database(process.argv[2]);
db.pragma('busy_timeout = 10000');
const run = db.transaction((work) => work());
const insert = db.prepare('INSERT INTO t (x) VALUES (?)');
// Which immediate form this process has: better-sqlite3's own (sqliteTransaction) or the preload's (timed).
console.log(\`ready \${run.immediate.name} \${run.database === db}\`);
require('node:readline').createInterface({ input: process.stdin }).once('line', () => {
  for (let i = 0; i < 3; i++) run.immediate(() => insert.run(i));
  // With "throw": one more that fails inside, rolled back, as a write refused by its fence is.
  if (process.argv[3] === 'throw') try { run.immediate(() => { insert.run(99); throw new Error('stale'); }); } catch {}
  run(() => insert.run(10));
  run.deferred(() => insert.run(11));
  run.exclusive(() => insert.run(12));
  console.log(db.prepare('SELECT count(*) AS n FROM t').get().n);
  process.exit(0);
});
`;

/** Another process that takes the file's write lock and keeps it 1.5 s, saying "held" once it has it. */
const HOLDER = `
const Database = require(${JSON.stringify(join(ROOT, 'node_modules/better-sqlite3'))});
const db = new Database(process.argv[2]);
db.exec('BEGIN IMMEDIATE');
console.log('held');
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1500);
db.exec('COMMIT');
`;

/** `node ...args`, its stdout read a line at a time. */
function child(args: string[], env: NodeJS.ProcessEnv = {}) {
  const proc = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: proc.stdout! });
  const next = () => new Promise<string>((res, rej) => {
    lines.once('line', res);
    proc.once('exit', (code) => rej(new Error(`exited ${code}`)));
  });
  const exited = new Promise<number | null>((res) => proc.once('exit', res));
  return { proc, next, exited };
}

describe('bench/write-lock.mjs (the write lock of throughput.ts\'s worker processes)', () => {
  let db: ReturnType<typeof tempDb>;
  afterEach(() => db?.cleanup());

  /** A new file in WAL with the table, TIMED written beside it; `out`: where the figures go. */
  async function timedFile() {
    db = tempDb();
    const setup = new (await import('better-sqlite3')).default(db.path);
    setup.pragma('journal_mode = WAL');
    setup.exec('CREATE TABLE t (x INTEGER)');
    setup.close();
    const dir = resolve(db.path, '..');
    const timedScript = join(dir, 'timed.cjs');
    writeFileSync(timedScript, TIMED);
    return { dir, timedScript, out: join(dir, 'lock.jsonl') };
  }

  it('counts each immediate transaction once, with a wait that covers another process\'s hold, and leaves the other forms out', async () => {
    const { dir, timedScript, out } = await timedFile();
    const holderScript = join(dir, 'holder.cjs');
    writeFileSync(holderScript, HOLDER);

    const timed = child(['--import', join(ROOT, 'bench/write-lock.mjs'), timedScript, db.path], { BENCH_WRITE_LOCK: out });
    expect(await timed.next()).toBe('ready timed true');
    const holder = child([holderScript, db.path]);
    expect(await holder.next()).toBe('held');
    // The lock is held for 1.5 s from here: the first transaction waits for it.
    timed.proc.stdin!.write('go\n');
    expect(await timed.next()).toBe('6');
    expect(await timed.exited).toBe(0);
    expect(await holder.exited).toBe(0);

    expect(existsSync(out)).toBe(true);
    const lines = readFileSync(out, 'utf8').trim().split('\n');
    expect(lines).toHaveLength(1);
    const figures = JSON.parse(lines[0]!) as { pid: number; transactions: number; waitUs: number; holdUs: number; waitsOver1ms: number; longestWaitUs: number };
    expect(figures.pid).toBe(timed.proc.pid);
    expect(figures.transactions).toBe(3);
    // One of the three found the lock taken by the holder, which kept it far longer than a millisecond.
    expect(figures.waitsOver1ms).toBe(1);
    expect(figures.longestWaitUs).toBeGreaterThan(1000);
    expect(figures.waitUs).toBeGreaterThanOrEqual(figures.longestWaitUs);
    expect(figures.holdUs).toBeGreaterThan(0);
  });

  it('counts a transaction that throws inside it, which held the lock as well', async () => {
    const { timedScript, out } = await timedFile();
    const timed = child(['--import', join(ROOT, 'bench/write-lock.mjs'), timedScript, db.path, 'throw'], { BENCH_WRITE_LOCK: out });
    expect(await timed.next()).toBe('ready timed true');
    timed.proc.stdin!.write('go\n');
    // The failed one's row rolled back: the same six rows.
    expect(await timed.next()).toBe('6');
    expect(await timed.exited).toBe(0);
    const figures = JSON.parse(readFileSync(out, 'utf8').trim()) as { transactions: number };
    expect(figures.transactions).toBe(4);
  });

  it('leaves better-sqlite3 as it is without BENCH_WRITE_LOCK', async () => {
    const { timedScript } = await timedFile();
    const env = { ...process.env };
    delete env.BENCH_WRITE_LOCK;
    const timed = spawn(process.execPath, ['--import', join(ROOT, 'bench/write-lock.mjs'), timedScript, db.path], { env, stdio: ['pipe', 'pipe', 'inherit'] });
    const lines = createInterface({ input: timed.stdout! });
    const said: string[] = [];
    lines.on('line', (line) => {
      said.push(line);
      if (line.startsWith('ready')) timed.stdin!.write('go\n');
    });
    expect(await new Promise((res) => timed.once('exit', res))).toBe(0);
    // better-sqlite3's transactions as they are, and the same rows written.
    expect(said).toEqual(['ready sqliteTransaction true', '6']);
  });
});
