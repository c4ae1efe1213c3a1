/** What `npm run bench` (bench/run-all.ts) runs from bench/, and the section of RESULTS.md each run gives. */

/** Modules of bench/ that benches import, not benches (besides the *support.ts files). */
const NOT_BENCHES = new Set(['run-all.ts', 'aws-prices.ts', 'query-output.ts', 'langgraph-break-even.ts']);

/** The benches among `files` (names in bench/), sorted; with `only` given, those whose names start with one of them. */
export function benchFiles(files: readonly string[], only: readonly string[] = []): string[] {
  return files
    .filter((f) => f.endsWith('.ts') && !NOT_BENCHES.has(f) && !f.endsWith('support.ts'))
    .filter((f) => !only.length || only.some((o) => f.startsWith(o)))
    .sort();
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
