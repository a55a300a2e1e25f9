/**
 * pi-codemode's sandbox test cases (packages/codemode/test/sandbox.test.ts of earendil-works/pi), ported, and the
 * behaviours of pi-codemode 1.6.0 that Airlock lacked before (docs/compatibility.md, pi-codemode). Each runs against
 * every Airlock launcher and against pi-codemode itself (see targets.ts).
 */
import vm from "node:vm";
import type { CodemodeTool } from "airlock-codemode";
import { afterEach, describe, expect, it } from "vitest";
import { PRELUDE_SOURCE } from "../../../dist/engine/prelude.js";
import { PRELUDE_SOURCE as PI_PRELUDE_SOURCE } from "../../../node_modules/@earendil-works/pi-codemode/dist/runtime/prelude-source.js";
import { sandboxesOf, targets } from "./targets.ts";

const echo: CodemodeTool = { name: "echo", execute: (args) => args };

/** The first bytes of each image format, as base64: image() reads only the signature. */
const PNG = "iVBORw0KGgo=";
const JPEG = "/9j/4A==";
const GIF = "R0lGODlh";
const WEBP = "UklGRgAAAABXRUJQ";

describe("the prelude source", () => {
  it("parses as JavaScript (Airlock's and pi's)", () => {
    for (const source of [PRELUDE_SOURCE, PI_PRELUDE_SOURCE]) {
      expect(() => new vm.Script(source, { filename: "prelude.js" })).not.toThrow();
    }
  });
});

describe.each(targets)("$name: script execution", (target) => {
  const sandboxes = sandboxesOf(target);
  afterEach(() => sandboxes.closeAll());
  const sandbox = (tools: CodemodeTool[] = [], timeoutMs = 10_000) => sandboxes.make({ tools, timeoutMs });

  it("returns the value after a JSON round trip, with no output or calls", async () => {
    const s = sandbox();
    expect(await s.execute("return { a: 1, b: [true, 'x'] }")).toMatchObject({
      ok: true,
      value: { a: 1, b: [true, "x"] },
      output: [],
      calls: [],
    });
    expect(await s.execute("return 'plain'")).toMatchObject({ ok: true, value: "plain" });
    expect(await s.execute("")).toMatchObject({ ok: true, value: undefined });
  });

  it("awaits at the top level", async () => {
    expect(await sandbox().execute("const n = await Promise.resolve(41); return n + 1")).toMatchObject({
      ok: true,
      value: 42,
    });
  });

  it("keeps text(), image() and console output in the order it came", async () => {
    const result = await sandbox().execute(`
      console.log("hello", 1, { a: 1 });
      text({ json: true });
      text(undefined);
      text(7);
      image("data:image/png;base64,${PNG}");
      image({ image_url: "data:image/jpeg;base64,${JPEG}" });
      image({ type: "image", data: "${GIF}", mimeType: "image/gif" });
      image("data:image/png;base64,${WEBP}");
      image({ type: "image", data: "${PNG}" });
      console.error(new Error("bad"));
      return null;
    `);
    expect(result.ok).toBe(true);
    expect(result.output.slice(0, -1)).toEqual([
      { type: "text", text: 'hello 1 {"a":1}', console: true },
      { type: "text", text: '{"json":true}' },
      { type: "text", text: "undefined" },
      { type: "text", text: "7" },
      { type: "image", data: PNG, mimeType: "image/png" },
      { type: "image", data: JPEG, mimeType: "image/jpeg" },
      { type: "image", data: GIF, mimeType: "image/gif" },
      // The bytes decide the type, not what the URL declares.
      { type: "image", data: WEBP, mimeType: "image/webp" },
      { type: "image", data: PNG, mimeType: "image/png" },
    ]);
    expect(result.output.at(-1)).toMatchObject({ type: "text", text: expect.stringMatching(/^Error: bad/) });
  });

  it("refuses text() and image() arguments it cannot output, and outputs nothing for them", async () => {
    const result = await sandbox().execute(`
      const circular = {};
      circular.self = circular;
      const errors = [];
      for (const attempt of [
        () => text(circular),
        () => image(""),
        () => image("https://example.com/a.png"),
        () => image("data:image/png,raw"),
        () => image({ type: "text", text: "x" }),
        () => image({ type: "image", data: "" }),
        () => image(42),
        () => image("data:image/png;base64,AAAA!"),
        () => image("data:image/png;base64,AAAAA"),
        () => image("data:image/png;base64,AA=A"),
        () => image("data:image/png;base64,"),
        () => image("data:image/png;base64,AAAA\\n[Output truncated]"),
        () => image({ type: "image", data: "AAAA!", mimeType: "image/png" }),
        () => image("data:image/png;base64,AAAA"),
        () => image("data:image/png;base64,QUJD"),
        () => image("data:image/jpeg;base64,/9j/9w=="),
      ]) {
        try { attempt(); errors.push("no error"); } catch (error) { errors.push(error.name + ": " + error.message); }
      }
      return errors;
    `);
    expect(result.ok).toBe(true);
    expect(result.output).toEqual([]);
    const errors = result.ok ? (result.value as string[]) : [];
    expect(errors[0]).toMatch(/^TypeError: .*circular/);
    const expects =
      'TypeError: image expects a non-empty image URL string, an object with image_url, or an image block { type: "image", data, mimeType }';
    expect(errors.slice(1)).toEqual([
      expects,
      "TypeError: remote image URLs are not supported in tool outputs. Pass a base64 data URI instead",
      "TypeError: invalid image output. Pass a base64 data URI instead",
      'TypeError: image only accepts image blocks, got "text"',
      "TypeError: image expected image block data",
      expects,
      ...Array(6).fill("TypeError: invalid image output. The image data is not valid base64 (truncated or corrupted?)"),
      // The last is FF D8 FF F7: JPEG-LS, which providers do not take.
      ...Array(3).fill("TypeError: invalid image output. The image data is not a PNG, JPEG, GIF, or WebP image"),
    ]);
  });

  it("takes base64 image data that is wrapped, and large", async () => {
    const large = `iVBORw0KGgoA${"QUJD".repeat(256 * 1024)}`;
    const result = await sandbox().execute(`
      image("data:image/png;base64,iVBORw0K\\r\\nGgo=\\n");
      image("data:image/png;base64,${large}");
    `);
    expect(result.ok).toBe(true);
    expect(result.output).toEqual([
      { type: "image", data: PNG, mimeType: "image/png" },
      { type: "image", data: large, mimeType: "image/png" },
    ]);
  });

  it("ends successfully on exit(), keeping the output and store writes made before it", async () => {
    const result = await sandbox([echo]).execute(`
      text("before");
      store("k", 1);
      await tools.echo(1);
      try { exit(); } catch {}
      text("after");
      return "unreachable";
    `);
    expect(result).toMatchObject({
      ok: true,
      value: undefined,
      output: [{ type: "text", text: "before" }],
      storeWrites: { set: { k: 1 }, delete: [] },
    });
  });

  it("keeps the output made before a failure", async () => {
    const result = await sandbox().execute('text("partial");\nthrow new Error("boom")');
    expect(result).toMatchObject({ ok: false, output: [{ type: "text", text: "partial" }] });
  });

  it("reports a syntax error at the script's line", async () => {
    const result = await sandbox().execute("const a = 1;\nconst b = ;\nreturn a");
    expect(result).toMatchObject({ ok: false, error: { kind: "script", name: "SyntaxError" } });
    expect(!result.ok && result.error.stack).toMatch(/codemode\.js:2/);
  });

  it("reports a thrown error with its name, message and the script's line", async () => {
    const result = await sandbox().execute("const a = 1;\nthrow new TypeError('boom ' + a)");
    expect(result).toMatchObject({ ok: false, error: { kind: "script", name: "TypeError", message: "boom 1" } });
    expect(!result.ok && result.error.stack).toMatch(/codemode\.js:2/);
  });

  it("writes stacks as V8 does, without frames of the prelude", async () => {
    const result = await sandbox().execute("console.log(new Error('inner'));\nthrow new RangeError('outer')");
    expect(result.ok).toBe(false);
    const stack = result.ok ? "" : (result.error.stack ?? "");
    expect(stack).toMatch(/^RangeError: outer\n {4}at .*codemode\.js:2/);
    expect(result.output[0]).toMatchObject({
      type: "text",
      text: expect.stringMatching(/^Error: inner\n {4}at .*codemode\.js:1/),
    });
    for (const text of [stack, JSON.stringify(result.output)]) {
      expect(text).not.toMatch(/codemode-prelude\.js|airlock:prelude/);
    }
  });

  it("reports a thrown value that is not an Error as its JSON", async () => {
    expect(await sandbox().execute("throw { code: 7 }")).toMatchObject({
      ok: false,
      error: { kind: "script", message: '{"code":7}' },
    });
  });

  it("reports a return value JSON cannot hold as a TypeError", async () => {
    expect(await sandbox().execute("return 10n")).toMatchObject({
      ok: false,
      error: { kind: "script", name: "TypeError" },
    });
  });
});

describe.each(targets)("$name: tools", (target) => {
  const sandboxes = sandboxesOf(target);
  afterEach(() => sandboxes.closeAll());
  const sandbox = (tools: CodemodeTool[] = [], timeoutMs = 10_000) => sandboxes.make({ tools, timeoutMs });

  it("offers tools as async functions and records each call", async () => {
    const seen: unknown[] = [];
    const add: CodemodeTool = {
      name: "add",
      execute: (args) => {
        seen.push(args);
        const { a, b } = args as { a: number; b: number };
        return { sum: a + b };
      },
    };
    const result = await sandbox([add]).execute(`
      const first = await tools.add({ a: 1, b: 2 });
      return (await tools.add({ a: first.sum, b: 10 })).sum;
    `);
    expect(result).toMatchObject({ ok: true, value: 13 });
    expect(seen).toEqual([
      { a: 1, b: 2 },
      { a: 3, b: 10 },
    ]);
    expect(result.calls.map((call) => [call.name, call.status])).toEqual([
      ["add", "ok"],
      ["add", "ok"],
    ]);
    expect(result.calls.every((call) => call.durationMs >= 0)).toBe(true);
  });

  it("runs calls concurrently and lists the tools' names", async () => {
    const delay: CodemodeTool = {
      name: "delay",
      execute: (args) => new Promise((resolve) => setTimeout(() => resolve(args), 20)),
    };
    const result = await sandbox([echo, delay]).execute(`
      const values = await Promise.all([tools.delay(1), tools.delay(2), tools.echo(3)]);
      return { values, names: Object.keys(tools) };
    `);
    expect(result).toMatchObject({ ok: true, value: { values: [1, 2, 3], names: ["echo", "delay"] } });
  });

  it("offers tools under identifiers, and lists them in a frozen ALL_TOOLS", async () => {
    const result = await sandbox([
      { name: "my-tool", description: "Dashes", execute: () => "dash" },
      { name: "mcp__docs__search", execute: () => "mcp" },
    ]).execute(`
      try { ALL_TOOLS.push({}); } catch {}
      return { all: ALL_TOOLS, calls: [await tools.my_tool(), await tools["my-tool"](), await tools.mcp__docs__search()] };
    `);
    expect(result).toMatchObject({
      ok: true,
      value: {
        all: [
          { name: "my_tool", description: "Dashes" },
          { name: "mcp__docs__search", description: "" },
        ],
        calls: ["dash", "dash", "mcp"],
      },
    });
  });

  it("takes two tools whose names become the same identifier: pi keeps the first, Airlock refuses them", async () => {
    const tools: CodemodeTool[] = [
      { name: "my-tool", execute: () => "dash" },
      { name: "my_tool", execute: () => "underscore" },
    ];
    if (!target.pi) {
      // A deliberate difference (docs/compatibility.md, pi-codemode): one of the two would be unreachable without a word.
      expect(() => sandbox(tools)).toThrow('tools "my-tool" and "my_tool" would both be tools.my_tool');
      return;
    }
    const result = await sandbox(tools).execute("return [ALL_TOOLS.length, await tools.my_tool()]");
    expect(result).toMatchObject({ ok: true, value: [1, "dash"] });
  });

  it("passes undefined arguments and results through as null", async () => {
    const result = await sandbox([{ name: "noop", execute: (args) => args }]).execute(
      "return [await tools.noop(), await tools.noop(null)]",
    );
    expect(result).toMatchObject({ ok: true, value: [null, null] });
  });

  it("turns a tool's error into an Error the script can catch", async () => {
    const fail: CodemodeTool = {
      name: "fail",
      execute: () => {
        throw new Error("tool exploded");
      },
    };
    const result = await sandbox([fail]).execute(`
      try { await tools.fail(); return "no error"; }
      catch (error) { return { isError: error instanceof Error, message: error.message }; }
    `);
    expect(result).toMatchObject({ ok: true, value: { isError: true, message: "tool exploded" } });
    expect(result.calls).toMatchObject([{ name: "fail", status: "error" }]);
  });

  it("fails a call of a tool that does not exist with a TypeError", async () => {
    expect(await sandbox().execute("return await tools.missing()")).toMatchObject({
      ok: false,
      error: { kind: "script", name: "TypeError" },
    });
  });

  it("aborts calls still running when the script returns", async () => {
    let aborted = false;
    const slow: CodemodeTool = {
      name: "slow",
      execute: (_args, { signal }) =>
        new Promise((_resolve, reject) => {
          signal.addEventListener("abort", () => {
            aborted = true;
            reject(new Error("aborted"));
          });
        }),
    };
    const result = await sandbox([slow]).execute("tools.slow(); return 'early'");
    expect(result).toMatchObject({ ok: true, value: "early" });
    expect(result.calls).toMatchObject([{ name: "slow", status: "cancelled" }]);
    expect(aborted).toBe(true);
  });

  it("names the close matches of a tool that does not exist", async () => {
    const s = sandbox([echo, { name: "web-search", execute: () => "" }]);
    const read = async (expression: string) => {
      const result = await s.execute(`return ${expression};`);
      return result.ok ? result.value : result.error.message;
    };
    // Airlock does not point at searchTools(query), which its sandboxes do not define (docs/compatibility.md).
    const hint = target.pi
      ? "ALL_TOOLS lists every tool; searchTools(query) finds tools by topic."
      : "ALL_TOOLS lists every tool.";
    expect(await read("tools.Echo")).toBe(
      `tools.Echo does not exist. Did you mean tools.echo? ${hint} Check for a member with "Echo" in tools.`,
    );
    expect(await read("tools.websearch")).toContain("Did you mean tools.web_search?");
    expect(await read("tools.nothing")).toContain("Available: echo, web_search.");
    expect(await read("['echo' in tools, 'nothing' in tools, String(tools.toString), JSON.stringify(tools)]")).toEqual([
      true,
      false,
      "undefined",
      "{}",
    ]);
  });

  it("registers and unregisters tools between executions", async () => {
    const s = sandbox();
    s.registerTool(echo);
    expect(() => s.registerTool(echo)).toThrow(/already registered/);
    expect(s.tools.map((tool) => tool.name)).toEqual(["echo"]);
    expect(await s.execute("return await tools.echo('a')")).toMatchObject({ ok: true, value: "a" });
    expect(s.unregisterTool("echo")).toBe(true);
    expect(await s.execute("return 'echo' in tools")).toMatchObject({ ok: true, value: false });
  });
});

describe.each(targets)("$name: store and load", (target) => {
  const sandboxes = sandboxesOf(target);
  afterEach(() => sandboxes.closeAll());
  const sandbox = () => sandboxes.make({ timeoutMs: 10_000 });

  it("reads the store passed in and reports what the script wrote", async () => {
    const result = await sandbox().execute(
      `
      const seen = load("counter");
      store("counter", seen + 1);
      store("list", [1, { a: null }]);
      store("old", undefined);
      return [seen, load("counter"), load("missing"), load("old")];
    `,
      { store: { counter: 41, old: "x" } },
    );
    expect(result).toMatchObject({
      ok: true,
      // The JSON round trip of the value turns undefined array elements into null.
      value: [41, 42, null, null],
      storeWrites: { set: { counter: 42, list: [1, { a: null }] }, delete: ["old"] },
    });
  });

  it("hands out copies: changing a loaded or stored object does not change the store", async () => {
    const result = await sandbox().execute(
      `const value = load("obj"); value.a = 2; const kept = { b: 1 }; store("kept", kept); kept.b = 2;
       return [load("obj").a, load("kept").b];`,
      { store: { obj: { a: 1 } } },
    );
    expect(result).toMatchObject({ ok: true, value: [1, 1], storeWrites: { set: { kept: { b: 1 } } } });
  });

  it("refuses keys that are not strings, values that are not JSON and writes past the limits", async () => {
    const result = await sandbox().execute(`
      const attempt = (fn) => { try { fn(); return "ok"; } catch (error) { return error.name; } };
      return [
        attempt(() => store(1, "x")),
        attempt(() => load({})),
        attempt(() => store("fn", () => 1)),
        attempt(() => store("big", "x".repeat(300 * 1024))),
        attempt(() => { for (let i = 0; i < 8; i++) store("k" + i, "x".repeat(200 * 1024)); }),
      ];
    `);
    expect(result).toMatchObject({
      ok: true,
      value: ["TypeError", "TypeError", "TypeError", "RangeError", "RangeError"],
    });
  });

  it("explains a write that is too large", async () => {
    const result = await sandbox().execute(`store("img", "x".repeat(300 * 1024));`);
    expect(result.ok).toBe(false);
    const message = result.ok ? "" : result.error.message;
    expect(message).toContain('store("img") value has 307202 characters of JSON');
    expect(message).toContain("Show images with image()");
  });

  it("reserves the names store and load", () => {
    const execute = () => undefined;
    for (const name of ["store", "load"]) {
      expect(() => sandboxes.make({ globals: [{ name, execute }] })).toThrow(/Invalid global/);
    }
  });
});

describe.each(targets)("$name: globals", (target) => {
  const sandboxes = sandboxesOf(target);
  afterEach(() => sandboxes.closeAll());

  it("offers globals as top-level functions, not recorded as calls", async () => {
    const seen: unknown[] = [];
    const s = sandboxes.make({ tools: [echo], globals: [{ name: "attach", execute: (args) => void seen.push(args) }] });
    const result = await s.execute(`
      await attach({ ref: 1 });
      attach("not awaited");
      return [typeof attach, typeof globalThis.attach, await tools.echo(2)];
    `);
    expect(result).toMatchObject({ ok: true, value: ["function", "function", 2] });
    expect(result.calls.map((call) => call.name)).toEqual(["echo"]);
    // Calls reach the host in order, so the global that was not awaited ran before the script ended.
    expect(seen).toEqual([{ ref: 1 }, "not awaited"]);
  });

  it("groups namespaced globals in a frozen object and spreads the arguments on request", async () => {
    const seen: unknown[] = [];
    const s = sandboxes.make({
      globals: [
        { name: "models.list", spread: true, execute: (args) => void seen.push(args) },
        { name: "models.first", execute: (args) => args },
      ],
    });
    const result = await s.execute(`
      await models.list("classifier", undefined, 3);
      await models.list();
      try { models.extra = 1; } catch {}
      return [Object.keys(models), await models.first("a", "ignored"), "extra" in models];
    `);
    expect(result).toMatchObject({ ok: true, value: [["list", "first"], "a", false] });
    expect(seen).toEqual([["classifier", null, 3], []]);
  });

  it("names the members of a namespace when a script reads one it lacks", async () => {
    const execute = () => undefined;
    const s = sandboxes.make({
      globals: [
        { name: "models.classify", execute },
        { name: "models.generateImages", execute },
      ],
    });
    const result = await s.execute("await models.generateImage();");
    expect(!result.ok && result.error.message).toBe(
      'models.generateImage does not exist. Did you mean models.generateImages? Check for a member with "generateImage" in models.',
    );
  });

  it("refuses global names that are not identifiers or that the environment uses", () => {
    const execute = () => undefined;
    for (const name of ["a.b.c", "a.", ".a", "tools.x", "store.x", "a.not-valid", "not-valid", "tools", "console"]) {
      expect(() => sandboxes.make({ globals: [{ name, execute }] }), name).toThrow(/Invalid global/);
    }
    expect(() =>
      sandboxes.make({
        globals: [
          { name: "models", execute },
          { name: "models.list", execute },
        ],
      }),
    ).toThrow(/conflicts with the namespace/);
  });
});

describe.each(targets)("$name: limits and lifetime", (target) => {
  const sandboxes = sandboxesOf(target);
  afterEach(() => sandboxes.closeAll());
  const sandbox = (tools: CodemodeTool[] = [], timeoutMs = 10_000) => sandboxes.make({ tools, timeoutMs });

  it("stops a synchronous endless loop at its deadline", async () => {
    expect(await sandbox().execute("while (true) {}", { timeoutMs: 200 })).toMatchObject({
      ok: false,
      error: { kind: "timeout" },
    });
  });

  it("runs without a deadline when timeoutMs is Infinity", async () => {
    const wait: CodemodeTool = { name: "wait", execute: () => new Promise((r) => setTimeout(() => r("late"), 50)) };
    const result = await sandbox([wait]).execute("return await tools.wait()", {
      timeoutMs: Number.POSITIVE_INFINITY,
    });
    expect(result).toMatchObject({ ok: true, value: "late" });
  });

  it("fails a script that waits on a promise nothing can settle, but not one that returns first", async () => {
    const s = sandbox([echo]);
    const stalled = await s.execute("await tools.echo(1); await new Promise(() => {}); return 'never'", {
      timeoutMs: Number.POSITIVE_INFINITY,
    });
    expect(stalled).toMatchObject({
      ok: false,
      error: { kind: "script", message: expect.stringContaining("can never settle") },
    });
    const returned = await s.execute("tools.echo(2); return 'early'", { timeoutMs: Number.POSITIVE_INFINITY });
    expect(returned).toMatchObject({ ok: true, value: "early" });
  });

  it("stops a loop that spins on microtasks at its deadline", async () => {
    expect(await sandbox().execute("while (true) await null", { timeoutMs: 200 })).toMatchObject({
      ok: false,
      error: { kind: "timeout" },
    });
  });

  it("aborts through the signal (keeping its reason) and by close(), cancelling the calls in flight", async () => {
    let toolSignal: AbortSignal | undefined;
    let called: () => void = () => {};
    const nextCall = () =>
      new Promise<void>((resolve) => {
        called = resolve;
      });
    const hang: CodemodeTool = {
      name: "hang",
      execute: (_args, { signal }) => {
        toolSignal = signal;
        called();
        return new Promise(() => {});
      },
    };
    const s = sandbox([hang]);
    const firstCall = nextCall();
    const closedLater = s.execute("await tools.hang(); return 'never'");
    await firstCall;
    const controller = new AbortController();
    controller.abort(new Error("user cancelled"));
    expect(toolSignal?.aborted).toBe(false);
    expect(await s.execute("await tools.hang()", { signal: controller.signal })).toMatchObject({
      ok: false,
      error: { kind: "aborted", message: "user cancelled" },
    });
    const second = new AbortController();
    const secondCall = nextCall();
    const pending = s.execute("await tools.hang(); return 'never'", { signal: second.signal });
    await secondCall;
    second.abort();
    const aborted = await pending;
    expect(aborted).toMatchObject({ ok: false, error: { kind: "aborted" } });
    expect(aborted.calls).toMatchObject([{ name: "hang", status: "cancelled" }]);
    expect(toolSignal?.aborted).toBe(true);
    await s.close();
    expect(await closedLater).toMatchObject({ ok: false, error: { kind: "aborted", message: "Sandbox closed" } });
  });

  it("rejects execute() after close()", async () => {
    const s = sandbox();
    await s.close();
    await expect(s.execute("return 1")).rejects.toThrow(/closed/);
  });

  it("runs executions side by side without sharing state", async () => {
    const s = sandbox();
    const results = await Promise.all([
      s.execute("globalThis.shared = 'a'; await null; return globalThis.shared"),
      s.execute("globalThis.shared = 'b'; await null; return globalThis.shared"),
      s.execute("return typeof globalThis.shared"),
    ]);
    expect(results.map((result) => (result.ok ? result.value : result.error))).toEqual(["a", "b", "undefined"]);
  });

  it("turns deep recursion into a RangeError the script can catch", async () => {
    const result = await sandbox().execute(`
      let depth = 0;
      function dive() { depth++; dive(); }
      try { dive(); } catch (error) { return [error.name, depth > 1000]; }
    `);
    expect(result).toMatchObject({ ok: true, value: ["RangeError", true] });
  });

  it("enforces the memory limit inside the script", async () => {
    const s = sandboxes.make({ timeoutMs: 20_000, memoryLimitBytes: 32 * 1024 * 1024 });
    const result = await s.execute("const a = []; while (true) a.push(new Array(1e5).fill('x'))");
    expect(result).toMatchObject({ ok: false, error: { kind: "script", name: "InternalError" } });
  });

  it.runIf(target.takesWasm)("reports a wasm module that fails to load as a sandbox error", async () => {
    const s = sandboxes.make({ wasm: Promise.reject(new Error("no wasm")) });
    const result = await s.execute("return 1");
    expect(result).toMatchObject({
      ok: false,
      error: { kind: "sandbox", message: expect.stringContaining("no wasm") },
    });
  });
});

describe.each(targets)("$name: escape hatches", (target) => {
  const sandboxes = sandboxesOf(target);
  afterEach(() => sandboxes.closeAll());
  const sandbox = (tools: CodemodeTool[] = []) => sandboxes.make({ tools, timeoutMs: 10_000 });

  it("has no host globals", async () => {
    const result = await sandbox().execute(`
      return [typeof process, typeof require, typeof module, typeof setTimeout, typeof fetch,
        typeof WebAssembly, typeof std, typeof os, typeof globalThis.constructor];
    `);
    expect(result).toMatchObject({ ok: true, value: [...Array(8).fill("undefined"), "function"] });
  });

  it("keeps eval and Function inside the VM", async () => {
    const result = await sandbox([echo]).execute(`
      return [
        eval("typeof process"),
        new Function("return typeof process")(),
        tools.echo.constructor("return typeof require")(),
        (async () => {}).constructor("return typeof setTimeout")() instanceof Promise,
      ];
    `);
    expect(result).toMatchObject({ ok: true, value: ["undefined", "undefined", "undefined", true] });
  });

  it("refuses a dynamic import", async () => {
    const result = await sandbox().execute(
      `try { await import("node:fs"); return "imported"; } catch (error) { return error.constructor.name; }`,
    );
    expect(result.ok).toBe(true);
    expect(result.ok && result.value).not.toBe("imported");
  });

  it("offers no WebAssembly, even through globalThis", async () => {
    const result = await sandbox().execute(`
      if (typeof globalThis.WebAssembly === "undefined") return "absent";
      try { new globalThis.WebAssembly.Module(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0])); return "compiled"; }
      catch (error) { return error.constructor.name; }
    `);
    expect(result.ok && result.value).toBe("absent");
  });

  it("sends the true arguments whatever Promise.prototype.then was patched to", async () => {
    const result = await sandbox([echo]).execute(`
      const original = Promise.prototype.then;
      try {
        Promise.prototype.then = function (onFulfilled, onRejected) {
          for (const callback of [onFulfilled, onRejected]) {
            try { callback.constructor("return process")().exit(42); } catch {}
          }
          return original.call(this, onFulfilled, onRejected);
        };
      } catch {}
      return [await tools.echo(1), "clean"];
    `);
    expect(result).toMatchObject({ ok: true, value: [1, "clean"] });
  });

  it("keeps tools and console frozen", async () => {
    const result = await sandbox([echo]).execute(`
      try { tools.echo = () => 'nope'; } catch {}
      try { tools.extra = () => 'nope'; } catch {}
      try { globalThis.tools = null; } catch {}
      try { console.log = null; } catch {}
      return ["extra" in tools, await tools.echo('still'), typeof console.log];
    `);
    expect(result).toMatchObject({ ok: true, value: [false, "still", "function"] });
  });
});

/** What pi-codemode 1.6.0 does that Airlock once did not: ordinary code that models write. */
describe.each(targets)("$name: behaviours ported code relies on", (target) => {
  const sandboxes = sandboxesOf(target);
  afterEach(() => sandboxes.closeAll());
  const sandbox = (options = {}) => sandboxes.make({ tools: [echo], timeoutMs: 10_000, ...options });

  it("lets ordinary code assign the names frozen intrinsics hold (the override mistake)", async () => {
    const result = await sandbox().execute(`
      class NotFound extends Error { constructor(message) { super(message); this.name = "NotFound"; } }
      const sloppy = new Function(\`
        const o = {}; o.toString = () => "custom"; o.constructor = "mine";
        const e = new Error(); e.message = "set later";
        return [String(o), o.constructor, e.message, Object.keys(o)];
      \`)();
      const e = new NotFound("gone");
      return [e.name, String(e), e instanceof Error, sloppy, Object.isFrozen(Error.prototype)];
    `);
    expect(result).toMatchObject({
      ok: true,
      value: ["NotFound", "NotFound: gone", true, ["custom", "mine", "set later", ["toString", "constructor"]], true],
    });
  });

  it("prints an Error given to console.log with its name, message and stack", async () => {
    const result = await sandbox().execute("console.log(new Error('msg'));\nconsole.log('n', NaN, [NaN]);");
    expect(result.output).toMatchObject([
      { type: "text", text: expect.stringMatching(/^Error: msg\n {4}at .*codemode\.js:1/) },
      { type: "text", text: "n NaN [null]" },
    ]);
  });

  it("reports an Error whose message is not a string by the string it makes", async () => {
    const result = await sandbox().execute("const e = new Error('a'); e.message = 42; throw e");
    expect(result).toMatchObject({ ok: false, error: { kind: "script", name: "Error", message: "42" } });
  });

  it("lets a script catch an InternalError, its own or a refused allocation's, and go on", async () => {
    const result = await sandbox({ memoryLimitBytes: 32 * 1024 * 1024 }).execute(`
      let own;
      try { throw new InternalError("x"); } catch (error) { own = [error.name, error.message, error instanceof InternalError]; }
      let refused;
      try { const parts = []; for (;;) parts.push("x".repeat(1 << 20) + parts.length); }
      catch (error) { refused = [error.name, error.message]; }
      return [own, refused, await tools.echo("went on")];
    `);
    expect(result).toMatchObject({
      ok: true,
      value: [["InternalError", "x", true], ["InternalError", "out of memory"], "went on"],
    });
  });

  it("reads tools like a plain object: toString, in and JSON.stringify", async () => {
    const result = await sandbox().execute(
      "return [String(tools.toString), 'x' in tools, 'echo' in tools, JSON.stringify(tools), typeof tools.then]",
    );
    expect(result).toMatchObject({ ok: true, value: ["undefined", false, true, "{}", "undefined"] });
  });

  it("names the member a typo in a namespaced global missed", async () => {
    const s = sandboxes.make({ globals: [{ name: "models.classify", execute: () => "ok" }] });
    const result = await s.execute("await models.clasify({ text: 'x' })");
    expect(result.ok).toBe(false);
    const message = result.ok ? "" : result.error.message;
    expect(message).toMatch(/^models\.clasify does not exist\./);
    expect(message).toContain("classify");
  });

  it("sends out the same whatever a script does to JSON or Promise", async () => {
    const result = await sandbox().execute(`
      try { JSON = { stringify: () => '"evil"', parse: () => "evil" }; } catch {}
      try { globalThis.Promise = null; } catch {}
      text({ a: 1 });
      store("k", { b: 2 });
      return await tools.echo({ c: 3 });
    `);
    expect(result).toMatchObject({
      ok: true,
      value: { c: 3 },
      output: [{ type: "text", text: '{"a":1}' }],
      storeWrites: { set: { k: { b: 2 } } },
    });
  });

  it("reports the reason of a signal aborted before the run starts", async () => {
    const controller = new AbortController();
    controller.abort(new Error("the user left"));
    expect(await sandbox().execute("return 1", { signal: controller.signal })).toMatchObject({
      ok: false,
      error: { kind: "aborted", message: "the user left" },
    });
  });
});
