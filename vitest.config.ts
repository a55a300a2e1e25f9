import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    pool: "forks",
    // One printed line per missing system tool (bubblewrap, runsc, PostgreSQL), however many files skip for it.
    globalSetup: ["test/helpers/system-tools-setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Under Bun, vitest's import of zod from node_modules loses zod's `z` export; its own loader keeps it.
    ...(process.versions.bun === undefined ? {} : { server: { deps: { inline: ["zod"] } } }),
  },
});
