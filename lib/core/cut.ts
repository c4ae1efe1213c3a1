/**
 * The first `max` UTF-16 units, one fewer where the cut would split a surrogate pair (an emoji): half a
 * pair is not Unicode, and the Anthropic API refuses a request with one (400, "no low surrogate in
 * string"). An output's excerpt is stored in its step record and sent in every later prompt, so a split
 * pair would fail the run at its next model call, and every retry with it; a terminal shows half a pair as U+FFFD.
 */
export function cutAt(text: string, max: number): string {
  const high = text.charCodeAt(max - 1);
  return high >= 0xd800 && high <= 0xdbff ? text.slice(0, max - 1) : text.slice(0, max);
}
