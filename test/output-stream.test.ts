/**
 * `execute(code, { onOutput })`: each output item reaches the host as the script produces it, on every launcher, in
 * order and before the result; a callback that throws ends only its run.
 */
import type { CodemodeOutputItem, CodemodeSandboxBase } from "airlock-codemode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchers, PNG_1x1 } from "./helpers/sandboxes.ts";

describe.each(launchers)("$name sandbox onOutput", ({ make }) => {
  let sandbox: CodemodeSandboxBase;
  /** Resolves the open call of `gate`, so that a test decides when the script goes on. */
  let open: (() => void) | undefined;
  beforeAll(() => {
    sandbox = make({
      timeoutMs: 20_000,
      tools: [{ name: "gate", execute: () => new Promise<void>((resolve) => (open = resolve)) }],
    });
  });
  afterAll(() => sandbox.close());

  it("hands over the output before a tool call while the script waits on it, then the rest in order", async () => {
    const seen: CodemodeOutputItem[] = [];
    let seenAtGate: CodemodeOutputItem[] | undefined;
    const result = await sandbox.execute(
      `console.log("before"); text({ n: 1 }); image("data:image/png;base64,${PNG_1x1}");
       await tools.gate(); console.warn("after"); return 1;`,
      {
        onOutput: (item) => {
          seen.push(item);
          // The gate opens once the three items before it arrived: the script cannot go on without them.
          if (seen.length === 3) {
            seenAtGate = [...seen];
            setTimeout(() => open?.(), 0);
          }
        },
      },
    );
    expect(result.ok).toBe(true);
    expect(seenAtGate?.map((item) => (item.type === "text" ? item.text : item.type))).toEqual([
      "before",
      '{"n":1}',
      "image",
    ]);
    expect(seen).toEqual(result.output);
    expect(seen.at(-1)).toEqual({ type: "text", text: "after", console: true });
  });

  it("ends the run with a sandbox error naming the callback when it throws, and the next run is fine", async () => {
    const result = await sandbox.execute('text("one"); text("two"); return 1;', {
      onOutput: () => {
        throw new Error("the terminal went away");
      },
    });
    expect(!result.ok && result.error).toMatchObject({
      kind: "sandbox",
      message: expect.stringContaining("the onOutput hook threw: the terminal went away"),
    });
    const next = await sandbox.execute('text("fine"); return 2;');
    expect(next.ok && next.value).toBe(2);
  });

  it("refuses an onOutput that is not a function", async () => {
    await expect(sandbox.execute("return 1", { onOutput: "print" as never })).rejects.toThrow(
      "onOutput must be a function",
    );
  });
});
