import { defineConfig } from 'vitest/config';

// The AWS SDK's notice that its releases after early 2027 need Node 22 (we pin older ones) is noise in
// test output; set here so the global setup and the forked test workers all inherit it.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    // Tests that spawn CLI processes take tens of seconds on a loaded 2-core machine; none waits on a clock.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Two cores: more parallel files only adds contention on fsync-heavy tests.
    maxWorkers: 2,
    globalSetup: ['test/support/aws-global-setup.ts'],
    setupFiles: ['test/support/temp-cleanup.ts'],
  },
});
