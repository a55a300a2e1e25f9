/** TypeScript input (types erased in place) and the type-check mode. */
import { typecheckScript } from "airlock-codemode/source";
import { describe, expect, it } from "vitest";
import { launchers } from "./helpers/sandboxes.ts";

const readTool = {
  name: "read",
  description: "Read a file",
  inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
  outputSchema: { type: "string" },
  execute: (args: unknown) => `contents of ${(args as { path: string }).path}`,
};

describe.each(launchers)("$name sandbox with typescript: true", ({ make }) => {
  it("runs TypeScript with stack lines and columns of the script as written", async () => {
    const sandbox = make({ typescript: true, tools: [readTool] });
    const ok = await sandbox.execute(`interface Note { path: string; size: number }
const text: string = await tools.read({ path: "a.txt" } satisfies { path: string });
const note: Note = { path: "a.txt", size: text.length as number };
return note;`);
    expect(ok.ok && ok.value).toEqual({ path: "a.txt", size: "contents of a.txt".length });
    const thrown = await sandbox.execute(`type Id = string;
const id: Id = "x";
function fail(reason: string): never { throw new Error(reason); }
fail(id);`);
    expect(!thrown.ok && thrown.error.stack).toContain("at fail (codemode.js:3:");
    expect(!thrown.ok && thrown.error.stack).toContain("codemode.js:4:");
    const bad = await sandbox.execute("const a: number = 1;\nconst b: = 2;");
    expect(!bad.ok && bad.error).toMatchObject({ kind: "script", name: "SyntaxError" });
    expect(!bad.ok && bad.error.stack).toContain("codemode.js:2:");
    await sandbox.close();
  });
});

describe("typecheckScript", () => {
  it("reports diagnostics at the script's own lines and columns, without running it", () => {
    const result = typecheckScript(
      `const s: string = await tools.read({ path: "a" });
const n: number = await tools.read({ pth: "b" });
text(s.length); console.log(ALL_TOOLS.length); store("k", 1);`,
      { tools: [readTool] },
    );
    expect(result.ok).toBe(false);
    expect(result.diagnostics.map((d) => [d.line, d.column, d.code])).toEqual([
      [2, 7, 2322],
      [2, 38, 2561],
    ]);
    expect(result.diagnostics[1]?.message).toMatch(/'pth' does not exist/);
  });

  it("accepts a correct script and points line-1 columns at the script", () => {
    expect(typecheckScript(`return (await tools.read({ path: "x" })).toUpperCase();`, { tools: [readTool] })).toEqual({
      ok: true,
      diagnostics: [],
    });
    const first = typecheckScript("tools.nope();", { tools: [readTool] });
    expect(first.diagnostics[0]).toMatchObject({ line: 1, column: 7, code: 2339 });
  });
});
