import { FORMAT_VERSION } from './state.ts';

/**
 * Migrations from each old stored head format to the next, applied on load so a run paused under old
 * code resumes under new code. Key n migrates format n to n + 1.
 */
export const MIGRATIONS: Record<number, (head: Record<string, unknown>) => Record<string, unknown>> = {
  // Format 2 added the optional wait record. A format-1 head has none and reads as is; the number moved so
  // that code older than waits refuses a waiting run instead of dropping its wait.
  1: (head) => head,
};

export function migrateHead(head: Record<string, unknown>): Record<string, unknown> {
  let current = head;
  let version = typeof current.formatVersion === 'number' ? current.formatVersion : 1;
  while (version < FORMAT_VERSION) {
    const migrate = MIGRATIONS[version];
    if (!migrate) throw new Error(`no migration from state format ${version}`);
    current = { ...migrate(current), formatVersion: version + 1 };
    version += 1;
  }
  return current;
}
