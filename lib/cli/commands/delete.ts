import { InvalidInputError } from '../../core/errors.ts';
import { deleteRun } from '../../engine/operate/delete.ts';
import { openBackend, operateDeps, type CliOptions } from '../context.ts';

/** `delete <runId> [--json]`: a run that has ended, and everything kept for it, gone. */
export async function deleteCommand(runId: string | undefined, options: CliOptions & { json?: boolean }, out: (line: string) => void): Promise<number> {
  if (!runId) throw new InvalidInputError('usage: stepwise delete <runId> [--json]');
  // The bucket too: the run's head, read for its status and version, may be spilled there.
  const runtime = await openBackend(options, ['table', 'bucket']);
  try {
    const deleted = await deleteRun(operateDeps(runtime), runId);
    // Blobs are content-addressed, maybe another run's as well: the sweep frees those no record refers to now.
    const blobs = runtime.aws
      ? 'its large outputs in the bucket are freed by the next blob sweep (stepwise prune --backend aws)'
      : 'its large outputs are freed by the next stepwise prune, once a day old';
    const emails = deleted.emails ? `, ${deleted.emails} approval email${deleted.emails === 1 ? '' : 's'} in the outbox` : '';
    if (options.json) out(JSON.stringify({ ...deleted, blobs }, null, 2));
    else if (deleted.outcome === 'finished') out(`run ${runId}: an earlier delete of it was interrupted; the rest of it is deleted now${emails}; ${blobs}`);
    else out(`run ${runId} (${deleted.status} at version ${deleted.version}) deleted: its checkpoints, step records and idempotency records${emails}; ${blobs}`);
    return 0;
  } finally {
    runtime.close();
  }
}
