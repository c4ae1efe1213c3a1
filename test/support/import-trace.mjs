// Preloaded with `node --import` by tests that check what a command loads: every module URL the ESM
// loader resolves is appended to the file named by STEPWISE_IMPORT_TRACE (from the hooks' own thread,
// synchronously, so nothing is lost when the process exits).
import { register } from 'node:module';

register('./import-trace-hooks.mjs', import.meta.url);
