/**
 * `node --import tsx --import ./bench/compiled.mjs bench/<bench>.ts`: the bench measures stepwise as an
 * installed package runs it, the JavaScript tsc compiles into dist/ (`npm run build`), not the TypeScript
 * sources as tsx transforms them for a checkout. tsx's transform keeps function names with a wrapper call
 * at every function it creates (esbuild's keepNames), a cost the compiled code and the Lambda bundle do
 * not have. Every import of the repository's lib/, functions/ or infra/ is sent to its compiled file; the
 * bench scripts and their test helpers still run through tsx. bench/run-all.ts builds dist/ first.
 */
import { existsSync } from 'node:fs';
import { register } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = new URL('..', import.meta.url).href;
const dist = new URL('../dist/', import.meta.url).href;
if (!existsSync(fileURLToPath(new URL('lib/engine/advance.js', dist)))) {
  throw new Error('bench/compiled.mjs: dist/ is not built; run `npm run build` first (bench/run-all.ts does)');
}

register(`data:text/javascript,${encodeURIComponent(`
const root = ${JSON.stringify(root)};
const dist = ${JSON.stringify(dist)};
const compiled = /^(lib|functions|infra)\\/.*\\.ts$/;
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  const inside = resolved.url.startsWith(root) ? resolved.url.slice(root.length) : '';
  return compiled.test(inside) ? { ...resolved, url: dist + inside.slice(0, -3) + '.js', format: 'module' } : resolved;
}`)}`, pathToFileURL('./'));
