/** Every ```js block of the README runs as written, and prints what its comments say. */
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = new URL("../", import.meta.url);
const readme = readFileSync(new URL("README.md", root), "utf8");
const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1] as string);
// Inside the package, so that `import ... from "airlock-codemode"` resolves to this package's build.
const dir = new URL("test/.readme-tmp/", root);

describe("README examples", () => {
  it("has examples to run", () => {
    expect(blocks.length).toBeGreaterThanOrEqual(3);
  });

  it.each(blocks.map((code, i) => [i + 1, code] as const))(
    "block %i runs and prints what it promises",
    async (i, code) => {
      mkdirSync(dir, { recursive: true });
      const file = new URL(`block-${i}.mjs`, dir);
      writeFileSync(file, code);
      const { stdout } = await run(process.execPath, [file.pathname], { timeout: 20_000 });
      // Each `console.log(x); // expected` line promises output that contains `expected`.
      const promised = [...code.matchAll(/console\.log\([^;]*\); \/\/ (.+)$/gm)].map((m) => m[1] as string);
      expect(promised.length).toBeGreaterThan(0);
      for (const text of promised) expect(stdout).toContain(text.replace(/"/g, "'"));
    },
  );
});
