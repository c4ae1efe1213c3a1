/** `stepwise/local`: the embedded runtime (SQLite), for embedding the engine in a program of your own. */
export { DEFAULT_DB_PATH, openLocalRuntime } from './local/runtime.ts';
export type { LocalRuntime } from './local/runtime.ts';
