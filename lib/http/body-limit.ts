import type { MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';

/** The largest request body read: an event's payload may be 256 KiB, with room for its JSON around it. */
export const MAX_BODY_BYTES = 1024 * 1024;

/**
 * Read no further than any request needs: the largest is an event (MAX_EVENT_BYTES of payload). Each group
 * of routes puts it after its own authorization: a body sent without a Content-Length (chunked) is read
 * whole here, and the app read an unauthorized client's, up to 1 MiB, before it refused it.
 */
export const limitBody: MiddlewareHandler = bodyLimit({
  maxSize: MAX_BODY_BYTES,
  onError: (c) => {
    // The rest of the body is left unread, and Node closes such a connection after the answer: say so,
    // or the client keeps it alive and its next request on it fails ("other side closed").
    c.header('Connection', 'close');
    return c.json({ error: `the request body is over ${MAX_BODY_BYTES} bytes, the most any request takes` }, 413);
  },
});
