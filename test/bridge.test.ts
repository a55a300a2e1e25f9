/** Malformed traffic from a worker fails its executions with `sandbox` errors and nothing hangs. */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { CodemodeSandbox } from "airlock-codemode";
import { afterEach, describe, expect, it } from "vitest";

const run = promisify(execFile);
const badWorker = new URL("./fixtures/bad-worker.mjs", import.meta.url);
let sandbox: CodemodeSandbox | undefined;
afterEach(async () => {
  await sandbox?.close();
});

describe("the worker channel", () => {
  it.each([
    ["wrong types", "wrong-types", /broke the protocol: call has fields of the wrong type/],
    ["an unknown message kind", "unknown-kind", /broke the protocol: a VM message has an unknown type/],
    ["an unknown field", "unknown-field", /broke the protocol: done has an unknown field "extra"/],
    ["a message for an execution it was never given", "unknown-exec", /a run it was never sent/],
    ["a result that is not JSON", "not-json-result", /not JSON/],
    ["a message that is not a batch", "not-a-batch", /not a batch of messages/],
  ])("fails the execution with a sandbox error on %s, and replaces the worker", async (_, code, message) => {
    sandbox = new CodemodeSandbox({ poolSize: 1, workerUrl: badWorker, timeoutMs: 5_000 });
    await sandbox.warm();
    const result = await sandbox.execute(code);
    expect(result.ok).toBe(false);
    expect(!result.ok && result.error.kind).toBe("sandbox");
    expect(!result.ok && result.error.message).toMatch(message);
    // The pool keeps working: the replaced worker answers the next execution.
    const next = await sandbox.execute("fine");
    expect(next.ok && next.value).toBe(1);
    expect(sandbox.threadCount).toBe(1);
  });

  it("does not keep the host process alive once the pool is idle, even unclosed", async () => {
    const script = `import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { CodemodeSandbox } from "airlock-codemode";
      const sandbox = new CodemodeSandbox({ poolSize: 1 });
      const result = await sandbox.execute("return 6 * 7");
      console.log(result.ok && result.value);`;
    const { stdout } = await run(process.execPath, ["--input-type=module", "-e", script], {
      cwd: new URL("..", import.meta.url),
      timeout: 15_000,
    });
    expect(stdout.trim()).toBe("42");
  });

  it.each([
    ["a V8 flag", ["--max-old-space-size=512", "-e"], "commonjs"],
    ["a process-wide flag", ["--expose-gc", "-e"], "commonjs"],
    ["-e with --input-type", ["--input-type=module", "-e"], "module"],
    ["-e with --input-type and a V8 flag", ["--max-old-space-size=512", "--input-type", "module", "-e"], "module"],
  ])("starts its workers in a host run with %s", async (_, flags, type) => {
    const body = `const { CodemodeSandbox } = await import("airlock-codemode");
      const sandbox = new CodemodeSandbox({ poolSize: 1 });
      const result = await sandbox.execute("return 6 * 7");
      console.log(result.ok ? result.value : result.error.message);
      await sandbox.close();`;
    const script = type === "module" ? body : `(async () => { ${body} })();`;
    const { stdout } = await run(process.execPath, [...flags, script], {
      cwd: new URL("..", import.meta.url),
      timeout: 15_000,
    });
    expect(stdout.trim()).toBe("42");
  });

  it("kills a worker that does not stop a run in time", async () => {
    sandbox = new CodemodeSandbox({ poolSize: 1, workerUrl: badWorker, timeoutMs: 100 });
    const result = await sandbox.execute("silent");
    expect(!result.ok && result.error.kind).toBe("timeout");
    await new Promise((resolve) => setTimeout(resolve, 400));
    const next = await sandbox.execute("fine");
    expect(next.ok && next.value).toBe(1);
  });

  it("does not kill a worker whose stopped run waits behind another run that computes within its deadline", async () => {
    // One worker at most: the queued run stays behind the busy one (a pool that may grow moves it to a spare, where
    // it can finish before its abort).
    sandbox = new CodemodeSandbox({ poolSize: 1, maxPoolSize: 1, timeoutMs: 20_000 });
    await sandbox.warm();
    // Computes far past the stop grace (STOP_GRACE_MS, 50 ms), well within its own deadline.
    const busy = sandbox.execute("const t = Date.now(); while (Date.now() - t < 3000) {} return 'done';");
    const controller = new AbortController();
    const queued = sandbox.execute("return 'never ran'", { signal: controller.signal });
    setTimeout(() => controller.abort(), 100);
    expect(await queued).toMatchObject({ ok: false, error: { kind: "aborted" } });
    // Before, the worker was killed when the queued run had not stopped within the grace, ending the busy run with it.
    expect(await busy).toMatchObject({ ok: true, value: "done" });
    expect((await sandbox.execute("return 1")).ok).toBe(true);
  });

  it("reports a missing worker file as a sandbox error", async () => {
    sandbox = new CodemodeSandbox({ poolSize: 1, workerUrl: new URL("./fixtures/missing.mjs", import.meta.url) });
    const result = await sandbox.execute("return 1");
    expect(!result.ok && result.error.kind).toBe("sandbox");
  });
});
