import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { benchFiles, benchSection, benchUsage } from '../../bench/run-all-support.ts';

describe('what npm run bench runs (bench/run-all-support.ts)', () => {
  it('runs the benches of bench/, not the modules they import', () => {
    const benches = benchFiles(readdirSync(fileURLToPath(new URL('../../bench/', import.meta.url))));
    expect(benches).toContain('langgraph.ts');
    expect(benches).toContain('step-overhead.ts');
    // langgraph.ts imports it; run as a bench it printed nothing, an empty section of RESULTS.md.
    for (const module of ['langgraph-break-even.ts', 'aws-prices.ts', 'query-output.ts', 'run-all.ts', 'support.ts', 'run-all-support.ts', 'idle-core-support.ts']) {
      expect(benches).not.toContain(module);
    }
    expect(benches.every((f) => f.endsWith('.ts'))).toBe(true);
    expect(benches).toEqual([...benches].sort());
  });

  it('runs only the benches named by a prefix', () => {
    expect(benchFiles(['b.ts', 'a.ts', 'langgraph.ts', 'langgraph-break-even.ts', 'step.ts'], ['lang', 'a'])).toEqual(['a.ts', 'langgraph.ts']);
  });

  it('refuses a name that chooses no bench (a typo, an option), listing the benches, rather than run nothing', () => {
    const files = ['b.ts', 'a.ts', 'langgraph.ts', 'langgraph-break-even.ts'];
    expect(() => benchFiles(files, ['lang', 'langgrph', '--fast'])).toThrow(/^no bench's name starts with "langgrph", "--fast"\n\nusage: npm run bench/);
    expect(benchUsage(benchFiles(files))).toMatch(/The benches:\n\n {2}a\n {2}b\n {2}langgraph\n$/);
  });

  it('counts a bench that exits with an error, or prints nothing, as failed', () => {
    expect(benchSection('x.ts', 0, 'figures\n', 3.4)).toEqual({ failed: false, text: '## x.ts\n\n3 s\n\n```\nfigures\n```\n' });
    expect(benchSection('x.ts', 1, 'half\n', 2)).toMatchObject({ failed: true, text: expect.stringMatching(/^## x\.ts \(FAILED\)\n/) });
    expect(benchSection('x.ts', null, '', 2)).toMatchObject({ failed: true, text: expect.stringMatching(/^## x\.ts \(FAILED\)\n/) });
    expect(benchSection('x.ts', 0, ' \n\n', 0)).toMatchObject({ failed: true, text: expect.stringMatching(/^## x\.ts \(printed nothing\)\n/) });
  });
});
