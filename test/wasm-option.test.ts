/** The `wasm` option: a compiled module, or a promise of one (as `loadQuickJSWasm(path)` users pass it). */
import { CodemodeSandbox, InlineCodemodeSandbox, loadQuickJSWasm } from "airlock";
import { describe, expect, it } from "vitest";

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
