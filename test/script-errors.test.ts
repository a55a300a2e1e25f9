/**
 * Errors a model can act on (docs/sandbox.md, What a script sees and Results): a failed property call names the
 * property and the close matches (also for namespaced globals), and an error the engine raised names the callee and
 * quotes the script's failing line.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchers } from "./helpers/sandboxes.ts";

describe.each(launchers)("$name sandbox: errors a model can act on", ({ make }) => {
  let sandbox: ReturnType<typeof make>;
  beforeAll(async () => {
    sandbox = make({
      tools: [
        { name: "files__read_text_file", execute: () => "text" },
        { name: "files__list", execute: () => [] },
      ],
      globals: [{ name: "models.classify", execute: () => "label" }],
      timeoutMs: 10_000,
    });
    await sandbox.warm();
  });
  afterAll(() => sandbox.close());
  const failure = async (code: string) => {
    const result = await sandbox.execute(code);
    if (result.ok) throw new Error(`expected ${code} to fail`);
    return result.error;
  };

  it("names a missing tool or namespace member and what was meant", async () => {
    expect((await failure("await tools.files__read({ path: 'a' })")).message).toBe(
      'tools.files__read does not exist. Did you mean tools.files__read_text_file? ALL_TOOLS lists every tool. Check for a member with "files__read" in tools.',
    );
    expect((await failure("await models.clasify('x')")).message).toBe(
      'models.clasify does not exist. Did you mean models.classify? Check for a member with "clasify" in models.',
    );
    // Nothing close: the members are listed instead.
    expect((await failure("await models.summarize('x')")).message).toContain("Available: classify.");
  });

  it("names the callee of a call that is not a function, and quotes the line", async () => {
    const error = await failure(
      "const listing = await tools.files__list({});\nconst r = { items: 5 };\nreturn r.items.map((x) => x);",
    );
    expect(error).toMatchObject({
      name: "TypeError",
      message: "r.items.map is not a function (line 3: return r.items.map((x) => x);)",
    });
    expect(error.stack).toMatch(/^TypeError: r\.items\.map is not a function \(line 3: .*\)\n {4}at .*codemode\.js:3/);
    expect((await failure("const make = 1;\nnew make.thing()")).message).toBe(
      "make.thing is not a function (line 2: new make.thing())",
    );
    expect((await failure("return new Math.max(1, 2)")).message).toBe(
      "Math.max is not a constructor (line 1: return new Math.max(1, 2))",
    );
  });

  it("quotes the failing line of the engine's own errors, in nested functions too", async () => {
    const error = await failure("function pick(v) {\n  return v.entities[0];\n}\nreturn pick(null);");
    expect(error.message).toBe("cannot read property 'entities' of null (line 2: return v.entities[0];)");
    expect((await failure("return notDeclared + 1;")).message).toBe(
      "notDeclared is not defined (line 1: return notDeclared + 1;)",
    );
  });

  it("leaves the script's own errors as they are", async () => {
    expect(await failure("throw new TypeError('bad input: ' + 42)")).toMatchObject({
      name: "TypeError",
      message: "bad input: 42",
    });
  });

  it("explains the errors of deterministic runs alike", async () => {
    const run = sandbox.start("const o = {};\nawait o.fetchAll();", {
      startedAt: 0,
      seed: 1,
      onCall: () => {},
    });
    expect(await run.result).toMatchObject({
      ok: false,
      error: { name: "TypeError", message: "o.fetchAll is not a function (line 2: await o.fetchAll();)" },
    });
  });
});

describe("TypeScript scripts", () => {
  it("quote the failing line as written", async () => {
    const sandbox = launchers[0]?.make({ typescript: true, timeoutMs: 10_000 });
    if (!sandbox) throw new Error("no launcher");
    const result = await sandbox.execute("const r: { items?: string[] } = {};\nconst n: number = r.items!.length;");
    expect(!result.ok && result.error.message).toBe(
      "cannot read property 'length' of undefined (line 2: const n: number = r.items!.length;)",
    );
    await sandbox.close();
  });
});
