/** What `npm run bench` (bench/run-all.ts) runs from bench/, and the section of RESULTS.md each run gives. */

/** Modules of bench/ that benches import, not benches (besides the *support.ts files). */
const NOT_BENCHES = new Set(['run-all.ts', 'aws-prices.ts', 'query-output.ts', 'langgraph-break-even.ts']);

/** The benches among `files` (names in bench/), sorted; with `only` given, those whose names start with one of them. */
export function benchFiles(files: readonly string[], only: readonly string[] = []): string[] {
  const all = files.filter((f) => f.endsWith('.ts') && !NOT_BENCHES.has(f) && !f.endsWith('support.ts')).sort();
  // A filter that names no bench (a typo, an option) would build dist/ and then run nothing without a word.
  const unmatched = only.filter((o) => !all.some((f) => f.startsWith(o)));
  if (unmatched.length) throw new Error(`no bench's name starts with ${unmatched.map((o) => JSON.stringify(o)).join(', ')}\n\n${benchUsage(all)}`);
  return all.filter((f) => !only.length || only.some((o) => f.startsWith(o)));
}

/** What `npm run bench -- --help` prints: how to choose benches, and their names. */
export function benchUsage(benches: readonly string[]): string {
  return [
    'usage: npm run bench [-- <name> ...]',
    '',
    'Every bench in bench/, each figure next to its baseline measured in the same run; a full run writes',
    'bench/RESULTS.md. Names choose benches by the start of their file names (`npm run bench -- langgraph`);',
    'a partial run leaves RESULTS.md as it was. The benches:',
    '',
    ...benches.map((b) => `  ${b.replace(/\.ts$/, '')}`),
    '',
  ].join('\n');
}

/**
 * One bench's section of RESULTS.md, and whether it counts as failed: its exit status, or no output at all.
 * A bench that prints no figure is a module the list above should skip, or a bench that lost its output.
 */
export function benchSection(file: string, status: number | null, out: string, seconds: number): { failed: boolean; text: string } {
  const silent = status === 0 && !out.trim();
  const mark = status !== 0 ? ' (FAILED)' : silent ? ' (printed nothing)' : '';
  return { failed: status !== 0 || silent, text: `## ${file}${mark}\n\n${seconds.toFixed(0)} s\n\n\`\`\`\n${out.trimEnd()}\n\`\`\`\n` };
}
