// Test runner settings: one global setup starts redis-server and builds dist/ for process tests.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/global-setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Two cores: the suites share them with redis-server, nginx and the processes under test.
    maxWorkers: 2,
    reporters: ["default"],
  },
});
