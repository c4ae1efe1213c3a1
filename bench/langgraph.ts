/**
 * stepwise against LangGraph JS on the same 60-step agent loop, both on SQLite on this machine, in the
 * same run: ms per step and bytes stored per run, at 500 B and at 20 KB tool outputs.
 *
 * LangGraph: a StateGraph over MessagesAnnotation with one node that "calls the model" (a stub AIMessage
 * with one tool call) and runs the no-op tool (a ToolMessage of the output), looping 60 times, and the
 * same loop in the two-node shape of its prebuilt ReAct agent (model node, tools node); its
 * SqliteSaver on a file with synchronous=FULL, invoked with durability "sync" (each checkpoint written
 * before the next step starts). stepwise: the same loop (instant model, no-op read-only tool) through
 * advance() and through the whole worker path as runWorker drives it (receive, step, send, ack), plus the floor: one durable
 * SQLite insert. Both tools return the same output: JSON rows of a query result with varied values
 * (bench/query-output.ts). Bytes stored: every TEXT and BLOB value in the database after one run; stepwise
 * compresses its blobs, so the figure is also given with them counted at their own length.
 *
 * Each figure twice: with every case in this one process, as it always ran, and with each case in its own
 * worker process (the parent drives the rounds, interleaved as before): there the time one system's steps
 * take does not include collecting the garbage the other's left in a shared heap (LangGraph's messages
 * and checkpoints are far larger than stepwise's rows).
 *
 * Both on files whose WAL has started again from its beginning (a database in use for a while: every
 * commit overwrites WAL pages), and a third time with every round on a new file (every commit grows the
 * WAL, and its fsync writes the file's new size too: about twice the fsync). Before, each case kept one
 * file from a new one: LangGraph writes megabytes a run and was past its first ~1,000 WAL pages after the
 * first, while stepwise and the floor, a few KB a step, grew theirs in every timed round, so they were
 * timed on the slower fsync and LangGraph on the faster one.
 *
 * A fourth time with every case's database at synchronous=OFF: what each side computes per step. With the
 * first, it says how fast a disk 20x needs (formatBreakEven, bench/langgraph-break-even.ts).
 *
 *   node --import tsx bench/langgraph.ts [rounds]
 *   npm run build && node --import tsx --import ./bench/compiled.mjs bench/langgraph.ts [rounds]   (the compiled code, as npm run bench runs it)
 */
import { AIMessage, ToolMessage } from '@langchain/core/messages';
import { END, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph';
import { SqliteSaver } from '@langchain/langgraph-checkpoint-sqlite';
import Database from 'better-sqlite3';
import { fork } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { advance } from '../lib/engine/advance.ts';
import { startRun } from '../lib/engine/start.ts';
// Both sides' tool output, made in the warm-up round and handed out as it is after: the same bytes for the same step.
import { cachedQueryOutput } from './query-output.ts';
import { openLocalRuntime } from '../lib/local/runtime.ts';
import { benchCounts } from './args-support.ts';
import { benchDeps, codeMeasured, fmt, instantModel, median, noopAgent, tempDir, workerPathMsPerStep } from './support.ts';
import { idlePolicy, pinMainThreadFromEnv } from './idle-core-support.ts';
import { walRestarts } from './wal-support.ts';
import { formatBreakEven } from './langgraph-break-even.ts';

const STEPS = 60;
/** Timed rounds by default (`bench/langgraph.ts [rounds]`). */
const ROUNDS = 9;
const SIZES = [500, 20_000];

interface RoundResult { ms: number; bytes?: number; uncompressed?: number }
interface Case { name: string; run(round: number): Promise<RoundResult>; close?(): void }
/** Each case's database file in `dir`, named by the case's index: the parent reads its WAL while warming. */
const dbPathOf = (dir: string, bytes: number, index: number) => join(dir, `case${index}-${bytes}.db`);
/** CASES' names in the figures below, in their order (bench/fsync-count.ts runs each case by its index). */
export const CASE_LABELS = [
  'floor (one durable insert)', 'stepwise engine step (read-only)', 'stepwise worker path', 'LangGraph JS, one node (sync)', 'LangGraph JS, agent + tools (sync)',
] as const;
/** `fsyncOff`: the case's database at synchronous=OFF, so its steps time its own work alone (measure's fsyncOff). */
const CASES: ((path: string, bytes: number, fsyncOff?: boolean) => Case)[] = [
  floorCase, (path, bytes, fsyncOff) => stepwiseCase(path, bytes, 'engine', fsyncOff), (path, bytes, fsyncOff) => stepwiseCase(path, bytes, 'worker', fsyncOff), langGraphCase, langGraphTwoNodeCase,
];
/** The durability the floor's and LangGraph's databases get, and stepwise's in the fsync-off pass. */
const synchronous = (fsyncOff = false) => `synchronous = ${fsyncOff ? 'OFF' : 'FULL'}`;

/** Every TEXT and BLOB value stored in a SQLite database, in bytes. */
export function storedBytes(db: Database.Database): number {
  let total = 0;
  const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all() as { name: string }[];
  for (const { name } of tables) {
    const columns = db.prepare(`SELECT name FROM pragma_table_info('${name}')`).all() as { name: string }[];
    for (const c of columns) {
      const row = db.prepare(`SELECT coalesce(sum(length(CAST("${c.name}" AS BLOB))), 0) AS n FROM "${name}" WHERE typeof("${c.name}") IN ('text', 'blob')`).get() as { n: number };
      total += row.n;
    }
  }
  return total;
}

/** stepwise's blobs counted at their own length, as if stored uncompressed: how much compression gives. */
function uncompressedBlobExtra(db: Database.Database): number {
  return (db.prepare('SELECT coalesce(sum(bytes - length(data)), 0) AS n FROM blobs').get() as { n: number }).n;
}

const toolCount = (state: typeof MessagesAnnotation.State) => state.messages.filter((m) => m.getType() === 'tool').length;

/**
 * LangGraph's loop in the shape its prebuilt ReAct agent and its docs use: a model node and a tools node,
 * so each step is two supersteps and two checkpoints. The one-node loop below is the cheapest shape it has.
 */
function langGraphTwoNodeCase(path: string, bytes: number, fsyncOff?: boolean) {
  const saver = SqliteSaver.fromConnString(path);
  saver.db.pragma('journal_mode = WAL');
  saver.db.pragma(synchronous(fsyncOff));
  const graph = new StateGraph(MessagesAnnotation)
    .addNode('agent', (state) => {
      const id = `call_${toolCount(state) + 1}`;
      return { messages: [new AIMessage({ content: '', tool_calls: [{ name: 'noop', args: {}, id, type: 'tool_call' }] })] };
    })
    .addNode('tools', (state) => {
      const n = toolCount(state) + 1;
      return { messages: [new ToolMessage({ content: cachedQueryOutput(n, bytes), tool_call_id: `call_${n}` })] };
    })
    .addEdge(START, 'agent')
    .addEdge('agent', 'tools')
    .addConditionalEdges('tools', (state) => (toolCount(state) >= STEPS ? END : 'agent'))
    .compile({ checkpointer: saver });
  return {
    name: 'LangGraph JS, agent + tools nodes, SqliteSaver, durability sync',
    async run(round: number): Promise<{ ms: number; bytes?: number }> {
      const t0 = process.hrtime.bigint();
      const final = await graph.invoke({ messages: [{ role: 'user', content: 'do 60 steps' }] }, { configurable: { thread_id: `t${round}` }, durability: 'sync', recursionLimit: 2 * STEPS + 10 });
      const ms = Number(process.hrtime.bigint() - t0) / 1e6 / STEPS;
      if (final.messages.length !== 1 + 2 * STEPS) throw new Error(`LangGraph ran ${final.messages.length} messages`);
      return { ms, ...(round === 0 ? { bytes: storedBytes(saver.db) } : {}) };
    },
    close: () => saver.db.close(),
  };
}

function langGraphCase(path: string, bytes: number, fsyncOff?: boolean) {
  const saver = SqliteSaver.fromConnString(path);
  saver.db.pragma('journal_mode = WAL');
  saver.db.pragma(synchronous(fsyncOff));
  const graph = new StateGraph(MessagesAnnotation)
    .addNode('agent', (state) => {
      const n = state.messages.filter((m) => m.getType() === 'tool').length + 1;
      const id = `call_${n}`;
      return { messages: [new AIMessage({ content: '', tool_calls: [{ name: 'noop', args: {}, id, type: 'tool_call' }] }), new ToolMessage({ content: cachedQueryOutput(n, bytes), tool_call_id: id })] };
    })
    .addEdge(START, 'agent')
    .addConditionalEdges('agent', (state) => (state.messages.filter((m) => m.getType() === 'tool').length >= STEPS ? END : 'agent'))
    .compile({ checkpointer: saver });
  return {
    name: `LangGraph JS, SqliteSaver, durability sync`,
    async run(round: number): Promise<{ ms: number; bytes?: number }> {
      const t0 = process.hrtime.bigint();
      const final = await graph.invoke({ messages: [{ role: 'user', content: 'do 60 steps' }] }, { configurable: { thread_id: `t${round}` }, durability: 'sync', recursionLimit: STEPS + 10 });
      const ms = Number(process.hrtime.bigint() - t0) / 1e6 / STEPS;
      if (final.messages.length !== 1 + 2 * STEPS) throw new Error(`LangGraph ran ${final.messages.length} messages`);
      return { ms, ...(round === 0 ? { bytes: storedBytes(saver.db) } : {}) };
    },
    close: () => saver.db.close(),
  };
}

function stepwiseCase(dbPath: string, bytes: number, path: 'engine' | 'worker', fsyncOff?: boolean) {
  const runtime = openLocalRuntime({ dbPath });
  // Only the fsync-off pass changes the checkpoints' connection (the one whose commits fsync; the queue's
  // never does at each commit): otherwise stepwise runs at the durability its runtime gives it.
  if (fsyncOff) runtime.db.pragma(synchronous(true));
  const deps = benchDeps(runtime, noopAgent({ sideEffect: false, outputBytes: bytes, stepCap: STEPS + 1, output: cachedQueryOutput }), instantModel('noop'));
  return {
    name: path === 'engine' ? 'stepwise, engine step (read-only tool)' : 'stepwise, worker path (receive+step+send+ack)',
    async run(round: number): Promise<{ ms: number; bytes?: number; uncompressed?: number }> {
      const runId = `r${round}`;
      await startRun(deps, { goal: 'do 60 steps', runId });
      let ms: number;
      if (path === 'worker') ms = await workerPathMsPerStep(deps, runtime, STEPS);
      else {
        const t0 = process.hrtime.bigint();
        for (let i = 0; i < STEPS; i++) await advance(deps, runId);
        ms = Number(process.hrtime.bigint() - t0) / 1e6 / STEPS;
      }
      if (round !== 0) return { ms };
      const stored = storedBytes(runtime.db);
      return { ms, bytes: stored, uncompressed: stored + uncompressedBlobExtra(runtime.db) };
    },
    close: () => runtime.close(),
  };
}

function floorCase(path: string, _bytes: number, fsyncOff?: boolean) {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma(synchronous(fsyncOff));
  db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT NOT NULL)');
  const insert = db.prepare('INSERT INTO t (payload) VALUES (?)');
  return {
    name: 'floor: one durable SQLite insert (500 B)',
    async run(): Promise<{ ms: number; bytes?: number }> {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < STEPS; i++) db.transaction(() => insert.run('x'.repeat(500)))();
      return { ms: Number(process.hrtime.bigint() - t0) / 1e6 / STEPS };
    },
    close: () => db.close(),
  };
}

/**
 * Runs each case's loop, untimed, until its database's WAL has started again from its beginning: from
 * then on every case's commits overwrite WAL pages instead of growing the file (see walRestarts), as in a
 * database that has been in use for a while. LangGraph writes megabytes a run and gets there in its first;
 * stepwise and the floor write a few KB a step and, timed from a new file, would pay a file-growing fsync
 * at every commit that LangGraph pays only at its first ~1,000 pages. Returns the runs each case took.
 */
async function warmWals(cases: Case[], dir: string, bytes: number): Promise<number[]> {
  const taken: number[] = [];
  let round = -1;
  for (const [i, c] of cases.entries()) {
    let runs = 0;
    while (walRestarts(dbPathOf(dir, bytes, i)) < 1) {
      if (++runs > 1000) throw new Error(`bench/langgraph.ts: ${c.name}: its WAL never started again`);
      await c.run(round--);
    }
    taken.push(runs);
  }
  return taken;
}

/** `stepwiseUncompressed`: stepwise's bytes with its blobs counted at their own length. */
export interface PeerFigures {
  /** The timed rounds its medians are of. */
  rounds: number;
  bytes: number; floorMs: number; engineMs: number; workerMs: number; langgraphMs: number; langgraph2Ms: number;
  stepwiseBytes: number; stepwiseUncompressed: number; langgraphBytes: number; langgraph2Bytes: number;
  /** Untimed runs each case took until its WAL started again (none: every round on a new file). */
  warmRuns?: number[];
  /**
   * Each LangGraph case's ms per step over stepwise's, round by round (a round runs every case once, one
   * after the other): a machine that slows down for a while slows both sides of a round's ratio, where
   * the medians above come from different rounds.
   */
  paired: { langgraphEngine: Spread; langgraphWorker: Spread; langgraph2Engine: Spread; langgraph2Worker: Spread };
}

/** The median of a figure's rounds, and its lowest and highest. */
export interface Spread { median: number; min: number; max: number }

function spread(xs: number[]): Spread {
  return { median: median(xs), min: Math.min(...xs), max: Math.max(...xs) };
}

/** `over[r] / under[r]` for each round r: a ratio measured within one round. */
function roundRatios(over: number[], under: number[]): Spread {
  return spread(over.map((ms, r) => ms / under[r]!));
}

/**
 * A case in a process of its own, this file run with `--case`: it builds the case and runs a round each
 * time the parent asks. The child gets the parent's Node options, so it runs the same (compiled) code.
 */
function isolatedCase(dir: string, bytes: number, index: number): Case {
  const child = fork(fileURLToPath(import.meta.url), ['--case', String(index), '--bytes', String(bytes), '--dir', dir], { execArgv: process.execArgv, stdio: 'inherit' });
  const replies: ((r: RoundResult | { error: string }) => void)[] = [];
  child.on('message', (r: RoundResult | { error: string }) => replies.shift()?.(r));
  // A child that dies mid-round fails the round instead of leaving the bench waiting for its reply.
  child.on('exit', (code, signal) => { for (const reply of replies.splice(0)) reply({ error: `its process exited (${signal ?? code})` }); });
  return {
    name: `case ${index}`,
    run: (round) => new Promise((resolve, reject) => {
      replies.push((r) => ('error' in r ? reject(new Error(`bench/langgraph.ts case ${index}: ${r.error}`)) : resolve(r)));
      child.send({ round });
    }),
    close: () => { child.kill(); },
  };
}

/**
 * A case in this process (`--case`): it runs a round each time the parent asks, or with `--runs n`, n
 * rounds one after the other and then exits (bench/fsync-count.ts counts a whole process's fsyncs).
 */
async function serveCase(): Promise<void> {
  pinMainThreadFromEnv(); // bench/idle-core.ts
  const arg = (name: string) => process.argv[process.argv.indexOf(name) + 1]!;
  const index = Number(arg('--case'));
  const c = CASES[index]!(dbPathOf(arg('--dir'), Number(arg('--bytes')), index), Number(arg('--bytes')));
  if (process.argv.includes('--runs')) {
    for (let round = 0; round < Number(arg('--runs')); round++) await c.run(round);
    c.close?.();
    return;
  }
  process.on('message', ({ round }: { round: number }) => {
    c.run(round).then((r) => process.send!(r), (error: Error) => process.send!({ error: error.stack ?? String(error) }));
  });
  process.on('disconnect', () => process.exit(0));
}

/**
 * The figures at each output size (`sizes`, default 500 B and 20 KB), median of `rounds` timed rounds after
 * one untimed. By default every case keeps one file, its WAL started again before the timed rounds
 * (warmWals); `fresh`: every round of every case on a new file, so each commit grows its WAL, as in the
 * first minutes of a new database.
 */
export async function measure(rounds = ROUNDS, options: { isolated?: boolean; fresh?: boolean; fsyncOff?: boolean; sizes?: readonly number[] } = {}): Promise<PeerFigures[]> {
  if (options.fsyncOff && (options.isolated || options.fresh)) throw new Error('bench/langgraph.ts: fsyncOff is measured in this one process, on kept files');
  const { dir, cleanup } = tempDir();
  const figures: PeerFigures[] = [];
  const opened: { close?(): void }[] = [];
  try {
    for (const bytes of options.sizes ?? SIZES) {
      const kept = options.fresh ? [] : CASES.map((make, i) => (options.isolated ? isolatedCase(dir, bytes, i) : make(dbPathOf(dir, bytes, i), bytes, options.fsyncOff)));
      opened.push(...kept);
      const ms = CASES.map(() => [] as number[]);
      const stored = CASES.map(() => 0);
      let uncompressed = 0;
      let warmRuns: number[] | undefined;
      for (let round = 0; round <= rounds; round++) {
        const cases = options.fresh ? CASES.map((make, i) => make(join(dir, `fresh${round}-case${i}-${bytes}.db`), bytes)) : kept;
        if (round === 1 && !options.fresh) warmRuns = await warmWals(cases, dir, bytes);
        for (const [i, c] of cases.entries()) {
          const r: RoundResult = await c.run(round);
          if (round === 0) { // round 0 warms up and measures one run's bytes
            stored[i] = r.bytes ?? 0;
            if (i === 1) uncompressed = r.uncompressed ?? 0;
          } else ms[i]!.push(r.ms);
        }
        if (options.fresh) for (const c of cases) c.close?.();
      }
      const [floorMs, engineMs, workerMs, langgraphMs, langgraph2Ms] = ms.map(median) as [number, number, number, number, number];
      figures.push({
        rounds, bytes, floorMs, engineMs, workerMs, langgraphMs, langgraph2Ms,
        stepwiseBytes: stored[1]!, stepwiseUncompressed: uncompressed, langgraphBytes: stored[3]!, langgraph2Bytes: stored[4]!,
        ...(warmRuns ? { warmRuns } : {}),
        paired: {
          langgraphEngine: roundRatios(ms[3]!, ms[1]!), langgraphWorker: roundRatios(ms[3]!, ms[2]!),
          langgraph2Engine: roundRatios(ms[4]!, ms[1]!), langgraph2Worker: roundRatios(ms[4]!, ms[2]!),
        },
      });
    }
  } finally {
    for (const c of opened) c.close?.();
    cleanup();
  }
  return figures;
}

/** A ratio's median over the rounds, with its range: `19.6x (17.2-23.4)`. */
const ratioSpread = (r: Spread): string => `${fmt(r.median, 1)}x (${fmt(r.min, 1)}-${fmt(r.max, 1)})`;

export function formatPeers(figures: PeerFigures[], where = 'every case in this one process', durability = 'synchronous=FULL'): string {
  const lines = [`60-step agent loop, stub model, no-op tool, SQLite WAL + ${durability}; median of ${figures[0]?.rounds} rounds; ${where}; ${codeMeasured()}`];
  for (const f of figures) {
    lines.push(`tool output ${f.bytes} B:`);
    // With the fsync off the floor is one insert, not a durable one.
    const labels = durability === 'synchronous=FULL' ? CASE_LABELS : CASE_LABELS.map((label) => label.replace('one durable insert', 'one insert, fsync off'));
    const [floor, engine, worker, oneNode, twoNodes] = labels.map((label) => `  ${label.padEnd(38)}`);
    lines.push(`${floor}${fmt(f.floorMs, 3)} ms`);
    lines.push(`${engine}${fmt(f.engineMs, 3)} ms   ${fmt(f.engineMs / f.floorMs, 2)}x floor`);
    lines.push(`${worker}${fmt(f.workerMs, 3)} ms   ${fmt(f.workerMs / f.floorMs, 2)}x floor`);
    lines.push(`${oneNode}${fmt(f.langgraphMs, 3)} ms   ${fmt(f.langgraphMs / f.engineMs, 1)}x stepwise engine step, ${fmt(f.langgraphMs / f.workerMs, 1)}x worker path`);
    lines.push(`${twoNodes}${fmt(f.langgraph2Ms, 3)} ms   ${fmt(f.langgraph2Ms / f.engineMs, 1)}x stepwise engine step, ${fmt(f.langgraph2Ms / f.workerMs, 1)}x worker path`);
    const { paired } = f;
    lines.push(`    paired by round: one node ${ratioSpread(paired.langgraphEngine)} engine step, ${ratioSpread(paired.langgraphWorker)} worker path; agent + tools ${ratioSpread(paired.langgraph2Engine)}, ${ratioSpread(paired.langgraph2Worker)}`);
    // LangGraph's step in durable inserts of the same run: 20x it is a stepwise step of that many / 20 inserts.
    lines.push(`    in floors: one node ${fmt(f.langgraphMs / f.floorMs, 1)}, agent + tools ${fmt(f.langgraph2Ms / f.floorMs, 1)}; 20x the agent + tools loop is a step of ${fmt(f.langgraph2Ms / f.floorMs / 20, 2)} floors or less`);
    lines.push(`  bytes stored per 60-step run          stepwise ${f.stepwiseBytes.toLocaleString('en-US')} B, LangGraph ${f.langgraphBytes.toLocaleString('en-US')} B (${fmt(f.langgraphBytes / f.stepwiseBytes, 1)}x), agent + tools ${f.langgraph2Bytes.toLocaleString('en-US')} B (${fmt(f.langgraph2Bytes / f.stepwiseBytes, 1)}x)`);
    lines.push(`    stepwise with blobs uncompressed    ${f.stepwiseUncompressed.toLocaleString('en-US')} B (${fmt(f.langgraphBytes / f.stepwiseUncompressed, 1)}x): compression gives ${fmt(f.stepwiseUncompressed / f.stepwiseBytes, 2)}x`);
    if (f.warmRuns) lines.push(`  untimed runs until each file's WAL started again: floor ${f.warmRuns[0]}, engine ${f.warmRuns[1]}, worker ${f.warmRuns[2]}, LangGraph ${f.warmRuns[3]} and ${f.warmRuns[4]}`);
  }
  return lines.join('\n');
}

if (process.argv.includes('--case')) await serveCase();
else if (import.meta.url === `file://${process.argv[1]}`) {
  // Every step here waits for an fsync on an idle core: what that core does then moves the ratios (bench/idle-core.ts).
  const [rounds] = benchCounts([{ name: 'rounds', fallback: ROUNDS }]) as [number];
  console.log(`idle cores: ${idlePolicy()}\n`);
  const durable = await measure(rounds);
  console.log(formatPeers(durable, "every case in this one process, each on a file whose WAL has started again (a database in use)"));
  console.log();
  console.log(formatPeers(await measure(rounds, { isolated: true }), 'each case in its own process, rounds interleaved, on such a file'));
  console.log();
  console.log(formatPeers(await measure(rounds, { fresh: true }), 'every case in this one process, each round on a new file (every commit grows its WAL)'));
  console.log();
  const workAlone = await measure(rounds, { fsyncOff: true });
  console.log(formatPeers(workAlone, 'every case in this one process, on such a file, the fsync off: what each side computes per step', 'synchronous=OFF'));
  console.log();
  console.log(formatBreakEven(durable, workAlone));
}
