import * as z from 'zod';
import type { ToolDefinition } from '../agent.ts';
import { InvalidInputError, ToolError } from '../core/errors.ts';
import { DEFAULT_INLINE_LIMIT } from '../core/result.ts';

export interface ReadOutputToolOptions {
  /**
   * The most one read returns, in UTF-8 bytes (default 3,500): its result must stay under the agent's
   * inlineLimit (default 4,096), or the part read would itself be stored by reference, as an excerpt.
   */
  maxBytes?: number;
  name?: string;
  description?: string;
}

const DEFAULT_MAX_BYTES = 3500;
/** Room for the line that says where the part is, under the default inlineLimit. */
const HEADER_ROOM = DEFAULT_INLINE_LIMIT - DEFAULT_MAX_BYTES;

/**
 * A tool that lets the model read a large output it saw only as an excerpt: an output over the agent's
 * inlineLimit goes to the blob store and the prompt keeps its first 1,000 characters and its ref. The
 * model reads the rest a part at a time by ref and offset. Read-only, so nothing is recorded before it runs.
 */
export function readOutput(options: ReadOutputToolOptions = {}): ToolDefinition<{ ref: string; offset?: number }> {
  const maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES;
  if (!(Number.isInteger(maxBytes) && maxBytes >= 256 && maxBytes <= 256 * 1024 - HEADER_ROOM)) {
    throw new InvalidInputError(`readOutput maxBytes must be a whole number of bytes from 256 to ${256 * 1024 - HEADER_ROOM}, got ${maxBytes}`);
  }
  return {
    name: options.name ?? 'read_output',
    description: options.description ?? `Read a large output of an earlier step that you saw only as an excerpt. Give its ref (the "stored as sha256:..." after the excerpt) and the character offset to start at (0, or the next offset a read gave you). You get up to ${maxBytes} bytes of it, and where the next part starts.`,
    input: z.object({
      ref: z.string().regex(/^sha256:[0-9a-f]{64}$/, 'the ref shown after the excerpt: sha256: and 64 hex digits').describe('The ref of the output, as shown after its excerpt'),
      offset: z.number().int().nonnegative().optional().describe('The character to start at; default 0'),
    }),
    sideEffect: false,
    run: async (input, ctx) => {
      const text = await ctx.readOutput(input.ref);
      let offset = input.offset ?? 0;
      if (offset > text.length) throw new ToolError(`offset ${offset} is past the end: the output is ${text.length} characters`);
      // Never from the second half of a surrogate pair: half a pair is not Unicode, and the API refuses it.
      if (isLowSurrogate(text.charCodeAt(offset)) && offset > 0) offset -= 1;
      const part = partOf(text, offset, maxBytes);
      const end = offset + part.length;
      const where = end < text.length ? `the next part starts at offset ${end}` : 'the end of the output';
      return `characters ${offset}-${end} of ${text.length} (${where}):\n${part}`;
    },
  };
}

/** From `offset`, whole characters up to `maxBytes` bytes of UTF-8. */
function partOf(text: string, offset: number, maxBytes: number): string {
  let bytes = 0;
  let end = offset;
  while (end < text.length) {
    const code = text.codePointAt(end)!;
    const size = code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4;
    if (bytes + size > maxBytes) break;
    bytes += size;
    end += code >= 0x10000 ? 2 : 1;
  }
  return text.slice(offset, end);
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}
