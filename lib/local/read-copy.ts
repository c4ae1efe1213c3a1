/**
 * Why a command that only reads has its SQLite file as a copy in memory, taken once as it opened it
 * (openDatabaseToRead), apart from the driver as busy.ts is: `watch`, which runs on AWS too, asks it.
 * 'older-layout': a file an older release's workers may still be on; 'unwritable-directory': a WAL file
 * in a directory this user may not write, where SQLite cannot make the -shm it reads it through.
 */
export type ReadCopy = 'older-layout' | 'unwritable-directory';

const readCopies = new WeakMap<object, ReadCopy>();

/** Marks `db` as such a copy. */
export function markReadCopy(db: object, why: ReadCopy): void {
  readCopies.set(db, why);
}

/** Whether `db` is such a copy, and why (undefined: the file itself). */
export const readCopyOf = (db: object): ReadCopy | undefined => readCopies.get(db);
