/**
 * TypeScript that amaro cannot strip within bounds fails alone, on every entry that strips it: a type nested 5,000
 * generics deep and 50,000 `-` signs overflow amaro's WebAssembly stack (which left amaro broken for every later
 * strip of the process: `execute` rejected, a gateway answered -32603 to every client), and a long run of `-` signs
 * takes amaro super-linear time (stripped on a thread of its own, under a deadline). Each fails as its own script
 * error, quickly, and the next plain JavaScript and TypeScript run as before.
 */
import { InlineCodemodeSandbox } from "airlock-codemode";
import { CodeToolError, createCodeTool } from "airlock-codemode/ai";
import { CodemodeSourceError, MAX_TYPESCRIPT_CHARS, stripTypeScript } from "airlock-codemode/source";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TYPESCRIPT_STRIP_TIMEOUT_MS } from "../dist/source/strip-thread.js";
import { paged } from "./fixtures/mcp/servers.ts";
import { gatewayWithClients } from "./helpers/gateway-clients.ts";
import { launchers } from "./helpers/sandboxes.ts";

/** Scripts that overflow amaro's stack. */
const DEEP = {
  "a type nested 5,000 generics deep": `let x: ${"A<".repeat(5000)}B${">".repeat(5000)} = 1;\nreturn x;`,
  "50,000 minus signs": `return ${"-".repeat(50_000)}1;`,
};
/**
 * A script amaro takes minutes on: a declaration with a run of 3,000 `-` signs takes it 0.1-0.7 s, four of them 10
 * times as long, and the time keeps growing faster than the count.
 */
const SLOW = Array.from({ length: 16 }, (_, i) => `let x${i} = 1${"-".repeat(3000)}1;`).join("\n");

const PLAIN = "return 40 + 2;";
const TYPED = "const n: number = 41;\nreturn n + 1;";
const TOO_DEEP = "The TypeScript script nests too deeply for its types to be stripped";

describe("stripTypeScript", () => {
  it("refuses a script nested too deeply for amaro's stack, and strips the next one", () => {
    for (const script of Object.values(DEEP)) {
      let error: unknown;
      try {
        stripTypeScript(script);
      } catch (caught) {
        error = caught;
      }
      expect(error).toBeInstanceOf(CodemodeSourceError);
      expect(error).toMatchObject({ rule: "typescript-limit" });
      expect((error as Error).message).toContain(TOO_DEEP);
      // Before, amaro's stack pointer stayed where the trap left it: every later call failed alike.
      expect(stripTypeScript(TYPED)).toBe("const n         = 41;\nreturn n + 1;");
    }
  });

  it(`refuses a script longer than ${MAX_TYPESCRIPT_CHARS} characters before amaro sees it`, () => {
    const long = `const a: number = 1;${" ".repeat(MAX_TYPESCRIPT_CHARS)}`;
    expect(() => stripTypeScript(long)).toThrow(
      expect.objectContaining({ rule: "typescript-limit", message: expect.stringContaining("at most 1048576") }),
    );
  });
});

describe.each(launchers)("$name sandbox with typescript: true", ({ make }) => {
  for (const [what, script] of Object.entries(DEEP)) {
    it(`fails ${what} as a script error and runs the next TypeScript and JavaScript`, async () => {
      const sandbox = make({ typescript: true, timeoutMs: 20_000 });
      try {
        const started = Date.now();
        const hostile = await sandbox.execute(script);
        expect(hostile).toMatchObject({ ok: false, error: { kind: "script", name: "SyntaxError" } });
        expect(!hostile.ok && hostile.error.message).toContain(TOO_DEEP);
        expect(Date.now() - started).toBeLessThan(15_000);
        expect(await sandbox.execute(TYPED)).toMatchObject({ ok: true, value: 42 });
        expect(await sandbox.execute(PLAIN)).toMatchObject({ ok: true, value: 42 });
        // start() strips on the same thread.
        const run = sandbox.start(script, { startedAt: 0, seed: 1, onCall: () => {} });
        expect(run.finished).toBe(false);
        expect(await run.result).toMatchObject({ ok: false, error: { kind: "script" } });
        expect(run.finished).toBe(true);
        const next = sandbox.start(TYPED, { startedAt: 0, seed: 1, onCall: () => {} });
        expect(await next.result).toMatchObject({ ok: true, value: 42 });
      } finally {
        await sandbox.close();
      }
    });
  }
});

describe("a script amaro takes minutes on", () => {
  it(`ends at ${TYPESCRIPT_STRIP_TIMEOUT_MS} ms as its own script error; scripts behind it are stripped`, async () => {
    const sandbox = new InlineCodemodeSandbox({ typescript: true });
    try {
      const started = Date.now();
      const slow = sandbox.execute(SLOW);
      // Queued behind it on the strip thread, they go to a new thread once the slow one is ended.
      const behind = [sandbox.execute(TYPED), sandbox.execute(PLAIN)];
      const result = await slow;
      expect(result).toMatchObject({ ok: false, error: { kind: "script", name: "SyntaxError" } });
      expect(!result.ok && result.error.message).toContain(
        `types were not stripped within ${TYPESCRIPT_STRIP_TIMEOUT_MS} ms`,
      );
      expect(Date.now() - started).toBeLessThan(TYPESCRIPT_STRIP_TIMEOUT_MS + 20_000);
      expect(await Promise.all(behind)).toMatchObject([
        { ok: true, value: 42 },
        { ok: true, value: 42 },
      ]);
    } finally {
      await sandbox.close();
    }
  });
});

describe("the MCP gateway", () => {
  let gateway: Awaited<ReturnType<typeof gatewayWithClients>>;

  beforeAll(async () => {
    gateway = await gatewayWithClients({ mcpServers: { steady: paged("--tools", "2") } }, { poolSize: 1 });
  });

  afterAll(() => gateway?.close());

  it("answers a hostile client's deep TypeScript with its script error, and every client's next program", async () => {
    const hostile = (await gateway.connect("hostile")).execute;
    const other = (await gateway.connect("other")).execute;
    for (const script of Object.values(DEEP)) {
      const answer = await hostile(script);
      expect(answer.isError).toBe(true);
      expect(answer.structuredContent).toMatchObject({ ok: false, error: { kind: "script" } });
      expect((answer.content[0] as { text: string }).text).toContain(TOO_DEEP);
      // Before: -32603 "memory access out of bounds" for every client until the gateway restarted.
      expect((await other(PLAIN)).structuredContent).toMatchObject({ ok: true, value: 42 });
      expect((await other(TYPED)).structuredContent).toMatchObject({ ok: true, value: 42 });
      expect((await hostile(TYPED)).structuredContent).toMatchObject({ ok: true, value: 42 });
    }
  });

  it("answers another client while a slow script is stripped", async () => {
    const hostile = (await gateway.connect("slow")).execute;
    const other = (await gateway.connect("waiting")).execute;
    const slow = hostile(SLOW);
    // The strip thread, not the gateway's, holds the slow script: another client's JavaScript gets its answer.
    const started = Date.now();
    expect((await other(PLAIN)).structuredContent).toMatchObject({ ok: true, value: 42 });
    const answer = await slow;
    expect(answer.structuredContent).toMatchObject({ ok: false, error: { kind: "script" } });
    expect((answer.content[0] as { text: string }).text).toContain("were not stripped within");
    expect(Date.now() - started).toBeLessThan(TYPESCRIPT_STRIP_TIMEOUT_MS + 20_000);
  });
});

describe("the AI SDK code tool", () => {
  it("fails a deep TypeScript program alone and runs the next", async () => {
    const sandbox = new InlineCodemodeSandbox();
    const code = createCodeTool({ tools: {}, sandbox });
    const execute = code.execute as (input: { code: string }, options: object) => Promise<unknown>;
    try {
      for (const script of Object.values(DEEP)) {
        const failed = execute({ code: script }, { toolCallId: "deep", messages: [] });
        await expect(failed).rejects.toThrow(CodeToolError);
        await expect(failed).rejects.toMatchObject({
          result: { ok: false, error: { kind: "script", message: expect.stringContaining(TOO_DEEP) } },
        });
        expect(await execute({ code: TYPED }, { toolCallId: "typed", messages: [] })).toEqual({
          ok: true,
          output: [],
          value: 42,
        });
        expect(await execute({ code: PLAIN }, { toolCallId: "plain", messages: [] })).toEqual({
          ok: true,
          output: [],
          value: 42,
        });
      }
    } finally {
      await sandbox.close();
    }
  });
});
