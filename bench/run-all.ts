/** `npm run bench`: every benchmark in bench/, one after another, each printing its own figures. */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const dir = fileURLToPath(new URL('.', import.meta.url));
const benches = readdirSync(dir).filter((f) => f.endsWith('.ts') && f !== 'run-all.ts' && !f.endsWith('support.ts')).sort();
let failed = 0;
for (const file of benches) {
  console.log(`\n=== ${file}`);
  // The AWS SDK's notice about its releases after early 2027 needing Node 22 (we pin older ones) is noise.
  const env = { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' };
  const r = spawnSync(process.execPath, ['--import', 'tsx', `${dir}${file}`], { stdio: 'inherit', env });
  if (r.status !== 0) failed++;
}
process.exitCode = failed ? 1 : 0;
