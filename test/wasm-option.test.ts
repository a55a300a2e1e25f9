/** The `wasm` option: a compiled module, or a promise of one (as `loadQuickJSWasm(path)` users pass it); and the loader. */
import { appendFileSync, copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CodemodeSandbox, InlineCodemodeSandbox, loadQuickJSWasm, WasmRewriteError } from "airlock-codemode";
import { afterAll, describe, expect, it } from "vitest";
import wabtInit from "wabt";

describe.each([
  ["worker", (wasm: unknown) => new CodemodeSandbox({ poolSize: 1, wasm: wasm as WebAssembly.Module })],
  ["inline", (wasm: unknown) => new InlineCodemodeSandbox({ wasm: wasm as WebAssembly.Module })],
])("%s sandbox wasm option", (_, make) => {
  it("accepts a module and a promise of one", async () => {
    for (const wasm of [loadQuickJSWasm(), Promise.resolve(loadQuickJSWasm())]) {
      const sandbox = make(wasm);
      const result = await sandbox.execute("return 6 * 7");
      expect(result.ok && result.value).toBe(42);
      await sandbox.close();
    }
  });

  it("fails executions with a sandbox error when the promised module fails", async () => {
    const sandbox = make(Promise.reject(new Error("quickjs.wasm is missing")));
    const result = await sandbox.execute("return 1");
    expect(!result.ok && result.error).toEqual({
      kind: "sandbox",
      message: "the sandbox could not start: quickjs.wasm is missing",
    });
    await sandbox.close();
  });

  it("refuses a wasm option that is neither", () => {
    expect(() => make("quickjs.wasm")).toThrow(/wasm must be a WebAssembly.Module or a promise/);
  });
});

describe("loadQuickJSWasm", () => {
  it("refuses a module whose writes it cannot track, naming the file and the way out", async () => {
    const wabt = await wabtInit();
    const parsed = wabt.parseWat("plain.wat", '(module (memory 1) (func (export "f")))', {});
    const path = join(mkdtempSync(join(tmpdir(), "airlock-wasm-")), "plain.wasm");
    writeFileSync(path, parsed.toBinary({}).buffer);
    parsed.destroy();
    expect(() => loadQuickJSWasm(path)).toThrow(WasmRewriteError);
    expect(() => loadQuickJSWasm(path)).toThrow(
      `cannot track the writes of ${path}: the module exports no __stack_pointer global; load it with { trackWrites: false }`,
    );
    const plain = loadQuickJSWasm(path, { trackWrites: false });
    expect(WebAssembly.Module.exports(plain).map((e) => e.name)).toEqual(["f"]);
  });

  it("instruments the installed QuickJS by default, and loads it as published on request", () => {
    const names = (module: WebAssembly.Module) => WebAssembly.Module.exports(module).map((e) => e.name);
    expect(names(loadQuickJSWasm())).toContain("airlock_mark_written");
    expect(names(loadQuickJSWasm(undefined, { trackWrites: false }))).not.toContain("airlock_mark_written");
    expect(() => loadQuickJSWasm(undefined, { trackWrite: false } as object)).toThrow(
      'loadQuickJSWasm has no option "trackWrite" (it takes trackWrites)',
    );
    expect(() => loadQuickJSWasm(undefined, { trackWrites: "no" as unknown as boolean })).toThrow(
      "trackWrites must be a boolean",
    );
  });
});

describe("the prebuilt instrumented module", () => {
  const engine = new URL("../dist/engine/wasm/", import.meta.url);
  const installed = readFileSync(createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm"));

  it("is what the rewrite makes of the installed binary, and is used for exactly those bytes", async () => {
    const { instrumentWrites } = await import("../dist/engine/wasm/write-tracking.js");
    const { catchableOutOfMemory } = await import("../dist/engine/wasm/catchable-oom.js");
    const { pollInterruptsOften } = await import("../dist/engine/wasm/interrupt-poll.js");
    const { tickLoops } = await import("../dist/engine/wasm/loop-ticks.js");
    const { prebuiltTrackedModule } = await import("../dist/engine/wasm/prebuilt.js");
    const prebuilt = prebuiltTrackedModule(installed);
    expect(prebuilt).toBeDefined();
    const rewritten = instrumentWrites(pollInterruptsOften(tickLoops(catchableOutOfMemory(installed))));
    expect(Buffer.from(prebuilt as Uint8Array).equals(Buffer.from(rewritten))).toBe(true);
    const changed = Buffer.from(installed);
    changed.writeUInt8(changed.readUInt8(0x100) ^ 1, 0x100);
    expect(prebuiltTrackedModule(changed)).toBeUndefined();
  });

  const copies: string[] = [];
  afterAll(() => {
    for (const dir of copies) rmSync(dir, { recursive: true, force: true });
  });

  it("is not used when the rewriter changed since the build, or when the file does not match its digest", async () => {
    const copy = (dir: string) => {
      copies.push(dir);
      const rewriters = ["write-tracking.js", "catchable-oom.js", "loop-ticks.js", "interrupt-poll.js", "binary.js"];
      const files = ["prebuilt.js", ...rewriters, "quickjs-tracked.wasm", "quickjs-tracked.json"];
      for (const file of [...files, "prebuilt.js.map", ...rewriters.map((name) => `${name}.map`)]) {
        copyFileSync(new URL(file, engine), join(dir, file));
      }
      return dir;
    };
    const intact = copy(mkdtempSync(join(tmpdir(), "airlock-prebuilt-")));
    expect((await import(join(intact, "prebuilt.js"))).prebuiltTrackedModule(installed)).toBeDefined();
    const newerRewriter = copy(mkdtempSync(join(tmpdir(), "airlock-prebuilt-")));
    appendFileSync(join(newerRewriter, "write-tracking.js"), "\n// changed\n");
    expect((await import(join(newerRewriter, "prebuilt.js"))).prebuiltTrackedModule(installed)).toBeUndefined();
    const newerPatch = copy(mkdtempSync(join(tmpdir(), "airlock-prebuilt-")));
    appendFileSync(join(newerPatch, "catchable-oom.js"), "\n// changed\n");
    expect((await import(join(newerPatch, "prebuilt.js"))).prebuiltTrackedModule(installed)).toBeUndefined();
    const newerTicks = copy(mkdtempSync(join(tmpdir(), "airlock-prebuilt-")));
    appendFileSync(join(newerTicks, "loop-ticks.js"), "\n// changed\n");
    expect((await import(join(newerTicks, "prebuilt.js"))).prebuiltTrackedModule(installed)).toBeUndefined();
    const newerPoll = copy(mkdtempSync(join(tmpdir(), "airlock-prebuilt-")));
    appendFileSync(join(newerPoll, "interrupt-poll.js"), "\n// changed\n");
    expect((await import(join(newerPoll, "prebuilt.js"))).prebuiltTrackedModule(installed)).toBeUndefined();
    const newerBinary = copy(mkdtempSync(join(tmpdir(), "airlock-prebuilt-")));
    appendFileSync(join(newerBinary, "binary.js"), "\n// changed\n");
    expect((await import(join(newerBinary, "prebuilt.js"))).prebuiltTrackedModule(installed)).toBeUndefined();
    const torn = copy(mkdtempSync(join(tmpdir(), "airlock-prebuilt-")));
    writeFileSync(
      join(torn, "quickjs-tracked.wasm"),
      readFileSync(new URL("quickjs-tracked.wasm", engine)).subarray(1),
    );
    expect((await import(join(torn, "prebuilt.js"))).prebuiltTrackedModule(installed)).toBeUndefined();
  });
});
