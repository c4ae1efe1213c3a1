/**
 * C0 and C1 control characters (and DEL) but newline and tab: a terminal acts on them (ESC starts a
 * sequence that can recolour, retitle or rewrite the screen) where they should be shown.
 */
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;

/**
 * Text for the terminal with each control character written as its escape, `\u001b` for ESC: goals,
 * summaries and tool output come from models, API callers and events. In JSON (which already escapes C0)
 * the escape is JSON's own, the same string to a parser.
 */
export function printable(text: string): string {
  return text.replace(CONTROL, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * Line breaks and tabs written as \n and \t, for a text that must stay one line of a table or of a
 * progress line: a run's reason holds a tool's error or a zod issue list, whose later lines read as lines
 * (a run's rows, a step's progress) of their own, and a tab moved the columns after it.
 */
export function escapeLineBreaks(text: string): string {
  return text.replace(/\r\n|[\r\n\u2028\u2029]/g, '\\n').replace(/\t/g, '\\t');
}

/**
 * Characters that hide, reorder or break the text around them, in a JSON text, written as JSON's own
 * escapes (the same string to a parser): for a tool call an approver reads. JSON.stringify leaves them as
 * they are, so a model's argument could start a line of its own ("old_rows\u2028\u2028Review and decide:
 * https://..."), be drawn in another order ("\u202eswor_dlo" shows as old_rows), or differ unseen from
 * the name it looks like: the approver would approve another call than the one that runs. The C1 controls
 * and DEL, the line and paragraph separators, the bidirectional marks, embeddings, overrides and isolates,
 * and the zero-width characters.
 */
const HIDING = /[\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/g;

export function revealedJson(json: string): string {
  return json.replace(HIDING, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
