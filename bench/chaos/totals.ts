import type { ScheduleReport, WaitFigures } from './engine-schedule.ts';

/** Faults only the AWS schedule injects (bench/chaos/aws-schedule.ts); absent from the engine's reports. */
export interface AwsFaults {
  /** DynamoDB writes applied and then answered with an error (the SDK retried, or gave up). */
  ambiguousWrites: number;
  /** Messages taken off the queue without a successor (as the dead-letter redrive takes one). */
  lostMessages: number;
  /** Runs the sweeper re-drove. */
  redriven: number;
}

/** The figures of a chaos run, summed over its schedules. */
export interface Totals extends Omit<ScheduleReport, 'seed' | 'steps' | 'violations' | 'unexpected' | 'received' | 'handedBack' | 'staleWrites' | 'concurrentWorkers' | 'hungTools' | 'clockSteps' | 'clockStepsSeen' | 'ledgerOnlyEffects' | 'appliedAgainAfterFault' | keyof WaitFigures>, WaitFigures, AwsFaults {
  schedules: number;
  received: number;
  handedBack: number;
  staleWrites: number;
  concurrentWorkers: number;
  hungTools: number;
  clockSteps: number;
  clockStepsSeen: number;
  ledgerOnlyEffects: number;
  appliedAgainAfterFault: number;
  violations: number;
  unexpected: number;
  /** Seeds of the schedules that broke an invariant: `--seed` replays each. */
  badSeeds: number[];
}

export function emptyTotals(): Totals {
  return {
    schedules: 0, runs: 0, crashes: 0, crashesByPoint: {}, duplicates: 0, delayed: 0, brownouts: 0, slowWorkers: 0, longEffects: 0,
    modelFaults: 0, ambiguousWrites: 0, lostMessages: 0, redriven: 0, appliedTwice: 0, stepsLost: 0, stuck: 0, completed: 0, failed: 0, completedSteps: 0, modelCalls: 0, blobsChecked: 0,
    violations: 0, unexpected: 0, badSeeds: [],
    waits: 0, gates: 0, gatesApproved: 0, gatedRuns: 0, answeredTwice: 0, answeredLate: 0, neverAnswered: 0, timedOut: 0, waitsTwice: 0, modelFaultsByKind: {},
    received: 0, handedBack: 0, staleWrites: 0, concurrentWorkers: 0, hungTools: 0, clockSteps: 0, clockStepsSeen: 0, ledgerOnlyEffects: 0, appliedAgainAfterFault: 0,
  };
}

export function add(totals: Totals, r: Partial<ScheduleReport & AwsFaults> & { seed: number }): void {
  totals.schedules++;
  for (const key of ['runs', 'crashes', 'duplicates', 'delayed', 'brownouts', 'slowWorkers', 'longEffects', 'modelFaults', 'ambiguousWrites', 'lostMessages', 'redriven', 'appliedTwice',
    'stepsLost', 'stuck', 'completed', 'failed', 'completedSteps', 'modelCalls', 'blobsChecked',
    'waits', 'gates', 'gatesApproved', 'gatedRuns', 'answeredTwice', 'answeredLate', 'neverAnswered', 'timedOut', 'waitsTwice', 'received', 'handedBack', 'staleWrites', 'concurrentWorkers', 'hungTools', 'clockSteps', 'clockStepsSeen', 'ledgerOnlyEffects', 'appliedAgainAfterFault'] as const) {
    totals[key] += r[key] ?? 0;
  }
  for (const [point, n] of Object.entries(r.crashesByPoint ?? {})) totals.crashesByPoint[point] = (totals.crashesByPoint[point] ?? 0) + n;
  for (const [kind, n] of Object.entries(r.modelFaultsByKind ?? {})) totals.modelFaultsByKind[kind] = (totals.modelFaultsByKind[kind] ?? 0) + n;
  totals.violations += r.violations?.length ?? 0;
  totals.unexpected += r.unexpected?.length ?? 0;
  if (r.violations?.length || r.unexpected?.length) totals.badSeeds.push(r.seed);
}

export function formatTotals(t: Totals, label: string): string {
  const perStep = t.completedSteps ? t.modelCalls / t.completedSteps : 0;
  const points = Object.entries(t.crashesByPoint).sort(([a], [b]) => a.localeCompare(b)).map(([p, n]) => `${p} ${n}`).join(', ');
  const faults = Object.entries(t.modelFaultsByKind).sort(([a], [b]) => a.localeCompare(b)).map(([p, n]) => `${p} ${n}`).join(', ');
  return [
    `${label}`,
    `  schedules                     ${t.schedules}`,
    `  runs                          ${t.runs}`,
    `  crashes injected              ${t.crashes}${points ? ` (${points})` : ''}`,
    `  duplicates delivered          ${t.duplicates}`,
    `  delayed deliveries            ${t.delayed}`,
    `  store brownouts               ${t.brownouts}`,
    `  slow workers (frozen, back)   ${t.slowWorkers}`,
    // Only the engine's schedules step the clock: the process and AWS blocks do not claim zero of them.
    ...(t.clockSteps ? [`  wall clock steps              ${t.clockSteps}${t.clockStepsSeen ? ` (${t.clockStepsSeen} steps back found by real workers)` : ''}`] : []),
    // Counted from real worker processes' logs only.
    ...(t.staleWrites ? [`  stale writes refused          ${t.staleWrites}`] : []),
    ...(t.concurrentWorkers ? [`  workers stepping 2-3 at once  ${t.concurrentWorkers}`] : []),
    `  effects longer than a lease   ${t.longEffects}`,
    ...(t.hungTools ? [`  tools hung (try timed out)    ${t.hungTools}`] : []),
    `  model faults                  ${t.modelFaults}${faults ? ` (${faults})` : ''}`,
    // Only the local runtime's step commits receive the worker's next delivery.
    ...(t.received ? [`  next deliveries in a commit   ${t.received} (${t.handedBack} handed back unstarted)`] : []),
    // Only the AWS schedules inject these: the engine's block does not claim zero of them.
    ...(t.ambiguousWrites || t.lostMessages || t.redriven ? [
      `  ambiguous writes              ${t.ambiguousWrites}`,
      `  messages lost (dead-lettered) ${t.lostMessages}`,
      `  runs re-driven by the sweeper ${t.redriven}`,
    ] : []),
    // Only the engine's schedules wait (the AWS agent has no waits): that block does not claim zero of them.
    ...(t.waits ? [
      `  waits                         ${t.waits}`,
      `  calls a person approves first ${t.gates} (${t.gatesApproved} approved in time, ${t.gatedRuns} run)`,
      `  waits answered twice          ${t.answeredTwice}`,
      `  waits answered late           ${t.answeredLate}`,
      `  waits never answered          ${t.neverAnswered}`,
      `  waits resolved twice          ${t.waitsTwice}   (must be 0)`,
    ] : []),
    // Only real worker processes' ledger-only effects: a kill or freeze after one acted, before its record.
    ...(t.ledgerOnlyEffects ? [`  ledger-only effects (keys)    ${t.ledgerOnlyEffects}, ${t.appliedAgainAfterFault} applied again after a fault (a holder killed, frozen or cut off after acting: no ledger can tell)`] : []),
    `  effects applied twice         ${t.appliedTwice}   (must be 0)`,
    `  steps lost                    ${t.stepsLost}   (must be 0)`,
    `  runs stuck                    ${t.stuck}   (must be 0)`,
    `  outputs by ref, read whole    ${t.blobsChecked}`,
    `  runs completed                ${t.completed}`,
    `  runs failed (injected fault)  ${t.failed}`,
    `  runs timed out (wait)         ${t.timedOut}`,
    `  model calls per completed step ${perStep.toFixed(3)}`,
    `  invariant violations          ${t.violations}${t.badSeeds.length ? `   seeds: ${t.badSeeds.slice(0, 20).join(' ')}` : ''}`,
    `  unexpected errors             ${t.unexpected}`,
  ].join('\n');
}
