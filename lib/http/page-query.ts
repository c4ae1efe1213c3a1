import * as z from 'zod';

/** The most runs or waits one page holds (GET /runs, GET /waits, the inspector's list). */
export const MAX_PAGE = 1000;

/**
 * A page's query: `limit` is text in a URL, so it is read as digits, and a bad one is named with what came
 * (not zod's "received NaN"); `cursor` is the `next` of the page before, checked where it is decoded.
 */
export const pageQuery = z.object({
  limit: z.string().refine((v) => /^\d{1,4}$/.test(v) && Number(v) >= 1 && Number(v) <= MAX_PAGE, {
    error: (issue) => `a whole number from 1 to ${MAX_PAGE}, got ${JSON.stringify(issue.input)}`,
  }).transform(Number).optional(),
  cursor: z.string().min(1).max(400).optional(),
});
