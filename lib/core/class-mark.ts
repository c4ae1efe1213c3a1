/**
 * `instanceof` that holds across copies of this package. An agent's `import 'stepwise'` can load a second
 * copy of the compiled code: a .ts agent in a CommonJS package (what `npm init` makes) goes through tsx's
 * require hook, which compiles the package's ES modules again for `require`; a `stepwise` command
 * installed globally beside a project's own is another. That copy's classes are not the engine's, so a
 * plain `instanceof` took its WaitRequest for a tool's result (the run went on without its approval)
 * and its PermanentError for an unknown error (tried three times). A marked class carries a registry
 * symbol (Symbol.for: the same in every copy) on its prototype, and its `instanceof` also accepts a value
 * that inherits that mark. A subclass left unmarked keeps the plain `instanceof`: a mark is never inherited
 * as a claim of a class it does not name.
 */
const marks = new WeakMap<object, symbol>();

type AnyClass = abstract new (...args: never[]) => unknown;

/** Marks `cls` under `name` (`stepwise.<name>` in the symbol registry). Once per class, at its definition. */
export function markClass(cls: AnyClass, name: string): void {
  const mark = Symbol.for(`stepwise.${name}`);
  Object.defineProperty(cls.prototype, mark, { value: true });
  marks.set(cls, mark);
}

/** What a marked class's static [Symbol.hasInstance] answers: its own instance, or one of a copy's. */
export function isInstanceOf(cls: AnyClass, value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return false;
  if (Function.prototype[Symbol.hasInstance].call(cls, value)) return true;
  const mark = marks.get(cls);
  return mark !== undefined && (value as Record<symbol, unknown>)[mark] === true;
}
