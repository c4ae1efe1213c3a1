import { DamagedBlobError } from '../core/errors.ts';
import { blobRef } from '../core/result.ts';
import type { BlobStore } from '../ports.ts';

/**
 * Attribute values above this many bytes are stored in the blob store and the item keeps their ref.
 * An item holds at most a few such values (head, decision, step record), so with 64 KB each no item can
 * reach DynamoDB's 400 KB, whatever the model chooses as tool input or the tools return.
 */
export const DEFAULT_SPILL_BYTES = 64 * 1024;

/** The suffix of the attribute that holds a spilled value's ref: `head` -> `headRef`. */
export const REF_SUFFIX = 'Ref';

/**
 * The values the stores spill, as a refusal's reason names them: each was "the step's output", whatever
 * it was (a tool input too large for an item, a DONE summary in the run's head).
 */
const SPILLED: Record<string, string> = {
  head: "the run's state with its goal, summary and wait",
  pending: "the step's decision with its tool input",
  record: "the step's record with its tool input and output",
  result: "the tool's result kept under its idempotency key",
  payload: "the event's payload",
};

/**
 * Moves oversized text attributes to the blob store by content address, and back. A spilled value is
 * written before the item that refers to it, so a crash in between leaves an orphan blob (harmless, the
 * same content maps to the same key) and never a ref to nothing.
 */
export class AttributeSpill {
  constructor(
    private readonly blobs: BlobStore,
    readonly limitBytes: number = DEFAULT_SPILL_BYTES,
  ) {}

  /**
   * The attributes to write for `name`: the text itself, or its ref under `${name}Ref`. The other one is
   * set to undefined so an update removes whatever an earlier write left there.
   */
  async keep(name: string, text: string): Promise<Record<string, string | undefined>> {
    const bytes = Buffer.byteLength(text);
    if (bytes <= this.limitBytes) return { [name]: text, [name + REF_SUFFIX]: undefined };
    const data = Buffer.from(text, 'utf8');
    const ref = blobRef(data);
    await this.blobs.put(ref, data, SPILLED[name] ?? name);
    return { [name]: undefined, [name + REF_SUFFIX]: ref };
  }

  /** The text of `name` in an item, fetched from the blob store if it was spilled; undefined if absent. */
  async restore(item: Record<string, unknown>, name: string): Promise<string | undefined> {
    const inline = item[name];
    if (typeof inline === 'string') return inline;
    const ref = item[name + REF_SUFFIX];
    if (typeof ref !== 'string') return undefined;
    let data: Buffer | undefined;
    try {
      data = await this.blobs.get(ref);
    } catch (error) {
      if (error instanceof DamagedBlobError) throw new MissingSpilledValueError(name, ref, error.why);
      throw error;
    }
    // A missing or damaged blob is lost data: the caller turns it into an unreadable checkpoint, never a silent gap.
    if (!data) throw new MissingSpilledValueError(name, ref);
    return data.toString('utf8');
  }
}

/** A spilled value the blob store no longer has, or gives back damaged (`damage` says how). */
export class MissingSpilledValueError extends Error {
  constructor(readonly attribute: string, readonly ref: string, damage?: string) {
    super(damage === undefined ? `${attribute} was stored as ${ref}, which the blob store no longer has` : `${attribute} was stored as ${ref}, which the blob store gives back damaged: ${damage}`);
    this.name = 'MissingSpilledValueError';
  }
}
