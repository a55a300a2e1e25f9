/**
 * `execute(code, { onProgress })`: each output item and each tool call's start and end reach the host as the script
 * makes them, on every launcher, in order and before the result; a listener that throws changes nothing.
 */
import type { CodemodeProgressEvent, CodemodeSandboxBase } from "airlock-codemode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchers, PNG_1x1 } from "./helpers/sandboxes.ts";

describe.each(launchers)("$name sandbox onProgress", ({ make }) => {
  let sandbox: CodemodeSandboxBase;
  /** Resolves the open call of `gate`, so that a test decides when the script goes on. */
  let open: (() => void) | undefined;
  beforeAll(() => {
    sandbox = make({
      timeoutMs: 20_000,
      tools: [
        { name: "gate", execute: () => new Promise<void>((resolve) => (open = resolve)) },
        {
          name: "fail",
          execute: () => {
            throw new Error("no");
          },
        },
      ],
    });
  });
  afterAll(() => sandbox.close());

  it("hands over the output and the call before a tool call while the script waits on it, then the rest in order", async () => {
    const seen: CodemodeProgressEvent[] = [];
    let seenAtGate: CodemodeProgressEvent[] | undefined;
    const result = await sandbox.execute(
      `console.log("before"); text({ n: 1 }); image("data:image/png;base64,${PNG_1x1}");
       await tools.gate(); console.warn("after"); await tools.fail().catch(() => {}); return 1;`,
      {
        onProgress: (event) => {
          seen.push(event);
          // The gate opens once the three items and its call arrived: the script cannot go on without them.
          if (seen.length === 4) {
            seenAtGate = [...seen];
            setTimeout(() => open?.(), 0);
          }
        },
      },
    );
    expect(result.ok).toBe(true);
    const shown = (e: CodemodeProgressEvent) =>
      e.type === "output" ? (e.item.type === "text" ? e.item.text : e.item.type) : `${e.type} ${e.name}`;
    expect(seenAtGate?.map(shown)).toEqual(["before", '{"n":1}', "image", "call gate"]);
    expect(seen.map(shown)).toEqual([
      "before",
      '{"n":1}',
      "image",
      "call gate",
      "result gate",
      "after",
      "call fail",
      "result fail",
    ]);
    expect(seen.filter((e) => e.type === "result").map((e) => e.type === "result" && e.ok)).toEqual([true, false]);
    expect(seen.flatMap((e) => (e.type === "output" ? [e.item] : []))).toEqual(result.output);
  });

  it("goes on when the listener throws", async () => {
    const result = await sandbox.execute('text("one"); text("two"); return 1;', {
      onProgress: () => {
        throw new Error("the terminal went away");
      },
    });
    expect(result.ok && result.value).toBe(1);
    expect(result.output).toHaveLength(2);
  });

  it("refuses an onProgress that is not a function", async () => {
    await expect(sandbox.execute("return 1", { onProgress: "print" as never })).rejects.toThrow(
      "onProgress must be a function",
    );
  });
});
