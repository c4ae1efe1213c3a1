import { InvalidInputError } from '../../core/errors.ts';
import { backendKind, dbPath, type CliOptions } from '../backend.ts';
import { shellWord } from '../format.ts';

/**
 * `backup <file>`: a snapshot of the local database, taken while its workers run, as a new file
 * (lib/local/backup.ts). On AWS the stores have backups of their own.
 */
export async function backupCommand(target: string | undefined, options: CliOptions, out: (line: string) => void): Promise<number> {
  if (backendKind(options) !== 'local') {
    throw new InvalidInputError('stepwise backup copies the local SQLite file; on AWS, back up the table with DynamoDB point-in-time recovery or on-demand backups, and the bucket with S3 versioning');
  }
  if (target === undefined) throw new InvalidInputError('usage: stepwise backup <file>: the path of a new file to write the backup to');
  const source = dbPath(options);
  const { backupDatabase } = await import('../../local/backup.ts');
  const made = await backupDatabase(source, target);
  const mb = (made.bytes / 2 ** 20).toFixed(1);
  out(`backed up ${source} to ${target}: ${made.runs} run${made.runs === 1 ? '' : 's'}, ${mb} MB, as they were at ${new Date(made.at).toISOString()}`);
  out(`restore it only with every process on ${source} stopped: see "Backing up and restoring" in the README (runs go back to that moment, and effects after it may apply again); to look inside: stepwise status --db ${shellWord(target)}`);
  return 0;
}
