/**
 * SQLite's refusal for a file whose pages are not what it wrote, apart from the driver as busy.ts is: the
 * CLI's error line tells it by its code alone.
 */

/** Whether an error is SQLite finding its file damaged (SQLITE_CORRUPT and its extended codes). */
export const isDamaged = (error: unknown) => /^SQLITE_CORRUPT/.test(String((error as { code?: unknown } | undefined)?.code ?? ''));

/**
 * What a command told "database disk image is malformed" is told besides: that no retry mends the file, and
 * how to get back what it holds. `database` names the file as the reader knows it.
 */
export function damagedDatabaseHint(database: string, file = '<file>'): string {
  return `${database} is damaged (cut short, or overwritten in part), which no retry mends: stop the workers on it, then restore it from a backup, or recover what it holds into a new file (sqlite3 ${file} .recover | sqlite3 recovered.db) and use that, or pick another --db`;
}
