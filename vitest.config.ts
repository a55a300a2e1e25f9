import { defineConfig } from "vitest/config";

/**
 * The AI SDK majors the package accepts besides the one installed as `ai` (6): the AI SDK tool's tests run again on
 * each, with `ai` and `ai/...` resolved to it in the tests and in Airlock's build, as they are for a user who has it.
 */
const OTHER_AI_SDKS = [
  { name: "ai@5", alias: "ai-5" },
  { name: "ai@7", alias: "ai-7" },
];

export default defineConfig({
  test: {
    pool: "forks",
    // One printed line per missing system tool (bubblewrap, runsc, PostgreSQL), however many files skip for it.
    globalSetup: ["test/helpers/system-tools-setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Under Bun, vitest's import of zod from node_modules loses zod's `z` export; its own loader keeps it.
    ...(process.versions.bun === undefined ? {} : { server: { deps: { inline: ["zod"] } } }),
    projects: [
      { extends: true, test: { name: "airlock", include: ["test/**/*.test.ts"] } },
      ...OTHER_AI_SDKS.map(({ name, alias }) => ({
        extends: true as const,
        test: { name, include: ["test/ai-code-tool.test.ts"] },
        resolve: { alias: [{ find: /^ai(?=$|\/)/, replacement: alias }] },
      })),
    ],
  },
});
