import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * Temporary directories made by the current test file. The setup file (temp-cleanup.ts) removes them all
 * after the file, so a directory is not left in the machine's temp folder when a test forgets its cleanup,
 * makes a second one in the same test, or fails before its cleanup runs.
 */
const made = new Set<string>();

export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.add(dir);
  return dir;
}

export function removeTempDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  made.delete(dir);
}

export function removeTempDirs(): void {
  for (const dir of made) removeTempDir(dir);
}
