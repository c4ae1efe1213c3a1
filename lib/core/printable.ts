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
