import type { Context } from 'hono';

/**
 * A posted form's fields, or undefined for a body that does not parse as the form its Content-Type names
 * (multipart with no boundary, or cut short): the route's own 400, where the parser's TypeError was a 500
 * "internal error", logged as a failed request, for whatever a scanner or a client sent. A field given
 * twice comes as an array, which no form's schema takes: `decision=approve&decision=reject` was read as
 * its last value, a rejection, where no one decision was sent.
 */
export async function readForm(c: Context): Promise<Record<string, unknown> | undefined> {
  try {
    return await c.req.parseBody({ all: true });
  } catch {
    return undefined;
  }
}
