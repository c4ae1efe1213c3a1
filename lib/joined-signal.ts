/**
 * A signal that aborts when either of two does, with the reason of the first to abort, and `release` to
 * detach it from both once its use has ended. Not AbortSignal.any: on Node 20 a signal it makes stays in its
 * sources' keeping until they abort, so a signal a program keeps for its life (its shutdown's), joined once
 * a step or a model call, held one more each time, for good (45 bytes a step).
 */
export function joinedSignal(a: AbortSignal, b: AbortSignal): { signal: AbortSignal; release(): void } {
  const both = new AbortController();
  const onA = () => both.abort(a.reason);
  const onB = () => both.abort(b.reason);
  const release = () => {
    a.removeEventListener('abort', onA);
    b.removeEventListener('abort', onB);
  };
  if (a.aborted) onA();
  else if (b.aborted) onB();
  else {
    a.addEventListener('abort', onA, { once: true });
    b.addEventListener('abort', onB, { once: true });
  }
  return { signal: both.signal, release };
}
