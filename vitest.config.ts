import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Two cores: more parallel files only adds contention on fsync-heavy tests.
    maxWorkers: 2,
    globalSetup: ['test/support/aws-global-setup.ts'],
  },
});
