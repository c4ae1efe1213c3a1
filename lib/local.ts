/** `stepwise/local`: the embedded runtime (SQLite), for embedding the engine in a program of your own. */
export { DEFAULT_DB_PATH, openLocalRuntime } from './local/runtime.ts';
export type { LocalRuntime } from './local/runtime.ts';
export { openLocalEngine } from './local/engine.ts';
export type { LocalEngine, LocalEngineOptions } from './local/engine.ts';
