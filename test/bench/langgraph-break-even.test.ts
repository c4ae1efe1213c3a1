import { describe, expect, it } from 'vitest';
import { formatBreakEven, fsyncAddedRatio, fsyncScaleFor, ratioAt, type StepTimes } from '../../bench/langgraph-break-even.ts';
import { measure } from '../../bench/langgraph.ts';

// Figures of the shape bench/langgraph.ts measures: LangGraph's step mostly its own work, stepwise's mostly the fsync.
const langgraph = { on: 3.9, off: 3.1 };
const stepwise = { on: 0.26, off: 0.05 };

describe('bench/langgraph-break-even.ts', () => {
  it('the ratio is the work alone at k = 0, the measured one at k = 1, and tends to what the fsync adds', () => {
    expect(ratioAt(0, langgraph, stepwise)).toBeCloseTo(62);
    expect(ratioAt(1, langgraph, stepwise)).toBeCloseTo(15);
    expect(ratioAt(1e9, langgraph, stepwise)).toBeCloseTo(0.8 / 0.21, 3);
    expect(fsyncAddedRatio(langgraph, stepwise)).toBeCloseTo(0.8 / 0.21, 9);
  });

  it('finds the fsync scale where the ratio crosses the target, and the ratio there is the target', () => {
    const scale = fsyncScaleFor(20, langgraph, stepwise);
    expect(scale).toEqual({ holds: 'below', k: (3.1 - 20 * 0.05) / (20 * 0.21 - 0.8) });
    if (scale.holds !== 'below') throw new Error('unreachable');
    expect(scale.k).toBeGreaterThan(0.6);
    expect(scale.k).toBeLessThan(0.62);
    expect(ratioAt(scale.k, langgraph, stepwise)).toBeCloseTo(20, 9);
    expect(ratioAt(scale.k * 0.99, langgraph, stepwise)).toBeGreaterThan(20);
    expect(ratioAt(scale.k * 1.01, langgraph, stepwise)).toBeLessThan(20);
  });

  it('says always or never when the ratio stays on one side, and above when a slower disk meets it', () => {
    expect(fsyncScaleFor(3, langgraph, stepwise)).toEqual({ holds: 'always' });
    expect(fsyncScaleFor(100, langgraph, stepwise)).toEqual({ holds: 'never' });
    // Work alone under the target, the fsync's share over it: met only on a disk slow enough.
    const scale = fsyncScaleFor(20, { on: 5, off: 1 }, { on: 0.2, off: 0.1 });
    expect(scale.holds).toBe('above');
    if (scale.holds !== 'above') throw new Error('unreachable');
    expect(ratioAt(scale.k, { on: 5, off: 1 }, { on: 0.2, off: 0.1 })).toBeCloseTo(20, 9);
  });

  it('refuses figures where the fsync made a step no slower, rather than dividing by noise', () => {
    expect(() => fsyncScaleFor(20, { on: 3, off: 3.1 }, stepwise)).toThrow('each side\'s step must take longer with the fsync than without');
    expect(() => fsyncScaleFor(20, langgraph, { on: 0.05, off: 0.05 })).toThrow(RangeError);
  });

  it('prints, from bench/langgraph.ts\'s figures, where each path meets 20x in k and in what the fsync adds to an insert', () => {
    const figures = (bytes: number, ms: Omit<StepTimes, 'bytes'>): StepTimes => ({ bytes, ...ms });
    const text = formatBreakEven(
      [figures(500, { floorMs: 0.158, engineMs: 0.252, workerMs: 0.266, langgraph2Ms: 4.304 }), figures(20_000, { floorMs: 0.12, engineMs: 0.2, workerMs: 0.2, langgraph2Ms: 0.15 })],
      [figures(500, { floorMs: 0.017, engineMs: 0.041, workerMs: 0.044, langgraph2Ms: 2.691 }), figures(20_000, { floorMs: 0.02, engineMs: 0.1, workerMs: 0.1, langgraph2Ms: 0.16 })],
    );
    // k = (2.691 - 20 * 0.041) / (20 * 0.211 - 1.613) = 0.716; the insert's fsync adds 141 us here.
    expect(text).toContain('engine step met at k <= 0.72, an insert\'s fsync adding at most 101 us (65.6x on its work alone, 17.1x here, 7.6x on what the fsync adds)');
    expect(text).toContain('worker path met at k <= 0.64, an insert\'s fsync adding at most 90 us');
    expect(text).toContain('k = 1 is this disk: the fsync adds 141 us to the insert\'s 158 us here');
    // LangGraph's step faster with the fsync than without: noise, said, not a figure.
    expect(text).toContain('tool output 20000 B: engine step: not measured (each side\'s step must take longer with the fsync than without');
  });

  it('bench/langgraph.ts measures the fsync-off pass only in one process on kept files, and refuses it otherwise', async () => {
    // The break-even pairs it with the in-process pass on kept files: another setting would pair unlike figures.
    await expect(measure(1, { fsyncOff: true, isolated: true })).rejects.toThrow('fsyncOff is measured in this one process, on kept files');
    await expect(measure(1, { fsyncOff: true, fresh: true })).rejects.toThrow('fsyncOff is measured in this one process, on kept files');
  });
});
