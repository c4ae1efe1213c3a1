/**
 * `node --import ./bench/write-lock.mjs ...`: times this process's write transactions on SQLite, for
 * bench/throughput.ts's worker processes. Every write the local runtime makes is a BEGIN IMMEDIATE
 * transaction (lib/local/database.ts `immediate`), which takes the file's one write lock before its first
 * statement and keeps it through its COMMIT and that COMMIT's fsync. For each one: the wait (from the call
 * until the lock is taken, SQLite's busy handler sleeping 1, 2, 5, 10 ms ... between tries) and the hold
 * (from then until the COMMIT returned). On exit the totals are appended, one JSON line, to the file named
 * by BENCH_WRITE_LOCK. Two clock reads a transaction, against a hold of a few hundred microseconds.
 *
 * It wraps better-sqlite3's transaction() in this process (the module the runtime loads, from the same
 * node_modules): its deferred, immediate and exclusive forms are read-only properties, so the function
 * handed back is a wrapper with the same three forms and its `database`, only `immediate` timed.
 */
import { appendFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const out = process.env.BENCH_WRITE_LOCK;
if (out) {
  const Database = createRequire(import.meta.url)('better-sqlite3');
  const totals = { transactions: 0, waitUs: 0, holdUs: 0, waitsOver1ms: 0, longestWaitUs: 0 };
  const record = (waitNs, holdNs) => {
    const waitUs = Number(waitNs) / 1e3;
    totals.transactions++;
    totals.waitUs += waitUs;
    totals.holdUs += Number(holdNs) / 1e3;
    if (waitUs > 1000) totals.waitsOver1ms++;
    totals.longestWaitUs = Math.max(totals.longestWaitUs, waitUs);
  };
  const original = Database.prototype.transaction;
  Database.prototype.transaction = function transaction(fn) {
    /** When the lock was taken: the transaction's own function begins right after its BEGIN returned. */
    let taken = 0n;
    const made = original.call(this, function (...args) {
      taken = process.hrtime.bigint();
      return fn.apply(this, args);
    });
    // A transaction that throws (a stale write refused by its fence) held the lock all the same, and is
    // counted; one whose BEGIN never got the lock (the busy timeout) never began, and is not.
    const timed = (...args) => {
      const asked = process.hrtime.bigint();
      taken = 0n;
      try {
        return made.immediate(...args);
      } finally {
        if (taken) record(taken - asked, process.hrtime.bigint() - taken);
      }
    };
    const wrapper = (...args) => made(...args);
    wrapper.deferred = made.deferred;
    wrapper.immediate = timed;
    wrapper.exclusive = made.exclusive;
    wrapper.database = made.database;
    return wrapper;
  };
  process.on('exit', () => appendFileSync(out, `${JSON.stringify({ pid: process.pid, ...totals })}\n`));
}
