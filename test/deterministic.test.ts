/** Deterministic runs: the same script, inputs and delivered results give the same calls, output and value. */
import {
  type CodemodeHostCall,
  type CodemodeResult,
  type CodemodeRun,
  type CodemodeSandboxBase,
  InlineCodemodeSandbox,
  MAX_CLOCK_MS,
} from "airlock-codemode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchers } from "./helpers/sandboxes.ts";

const script = `
  const first = await tools.lookup({ q: "a", at: Date.now(), r: Math.random() });
  text("first " + JSON.stringify(first));
  const [x, y] = await Promise.all([tools.lookup({ q: "x" }), classify(Math.random())]);
  console.log(performance.now(), new Date().toISOString(), typeof WeakRef, typeof FinalizationRegistry);
  store("seen", [first, x, y]);
  return { x, y, now: Date.now(), r: Math.random(), tz: new Date(0).getTimezoneOffset() };`;

interface Recording {
  calls: CodemodeHostCall[];
  answers: { seq: number; now: number; id: number; value: unknown }[];
  idle: [number, number][];
  fingerprint: string;
  result: CodemodeResult;
}

describe.each(launchers)("$name deterministic runs", ({ make }) => {
  let sandbox: CodemodeSandboxBase;
  beforeAll(() => {
    sandbox = make({ timeoutMs: 10_000 });
  });
  afterAll(async () => {
    await sandbox.close();
  });

  const options = {
    startedAt: Date.UTC(2026, 0, 1),
    seed: 7,
    tools: [{ name: "lookup", description: "Look something up" }],
    globals: [{ name: "classify" }],
    store: { before: 1 },
  };

  /** Runs the script, answering each call on a later turn with `answer(call)`, delivered in `order`. */
  async function record(order: "in-order" | "reversed"): Promise<Recording> {
    const calls: CodemodeHostCall[] = [];
    const answers: Recording["answers"] = [];
    const idle: [number, number][] = [];
    let fingerprint = "";
    let seq = 0;
    let batch: { seq: number; now: number; id: number; value: unknown }[] = [];
    const flush = () => {
      const pending = order === "reversed" ? [...batch].reverse() : batch;
      batch = [];
      for (const a of pending) run.deliver(a.seq, a.now, a.id, { ok: true, value: a.value });
    };
    const run = sandbox.start(script, {
      ...options,
      onStarted: (f) => {
        fingerprint = f;
      },
      onCall: (call) => {
        calls.push(call);
        seq++;
        const answer = { seq, now: options.startedAt + seq * 1000, id: call.id, value: `answer ${call.id}` };
        answers.push(answer);
        batch.push(answer);
        setTimeout(flush, 5);
      },
      onIdle: (s, issued) => idle.push([s, issued]),
    });
    const result = await run.result;
    expect(run.finished).toBe(true);
    return { calls, answers, idle, fingerprint, result };
  }

  it("gives the same calls, output and value when replayed, whatever order results arrive in", async () => {
    const original = await record("in-order");
    expect(original.result.ok).toBe(true);
    if (!original.result.ok) return;
    expect(original.calls.map((c) => [c.id, c.target, c.name])).toEqual([
      [1, "tool", "lookup"],
      [2, "tool", "lookup"],
      [3, "global", "classify"],
    ]);
    expect(original.calls[0]?.args).toMatchObject({ q: "a", at: options.startedAt });
    const value = original.result.value as { now: number; tz: number };
    expect(value.now).toBe(options.startedAt + 3000);
    expect(value.tz).toBe(0);
    expect(original.result.output[1]?.type === "text" && original.result.output[1].text).toMatch(
      /^3000 2026-01-01T00:00:03.000Z undefined undefined$/,
    );
    expect(original.result.storeWrites.set.seen).toEqual(["answer 1", "answer 2", "answer 3"]);
    expect(JSON.parse(original.fingerprint)).toMatchObject({ engine: "quickjs-wasi@3.7.0" });
    expect(original.idle[0]).toEqual([0, 1]);

    const replay = await record("reversed");
    expect(replay.calls).toEqual(original.calls);
    // Durations are wall-clock measurements of the host, not part of what the script did.
    const withoutDurations = (r: CodemodeResult) => ({ ...r, calls: r.calls.map((c) => ({ ...c, durationMs: 0 })) });
    expect(withoutDurations(replay.result)).toEqual(withoutDurations(original.result));
    expect(replay.result.calls.map((c) => c.status)).toEqual(["ok", "ok"]);
    expect(replay.fingerprint).toBe(original.fingerprint);
  });

  it("draws different random numbers from a different seed", async () => {
    const a = await sandbox.start("return Math.random();", { ...options, onCall: () => {} }).result;
    const b = await sandbox.start("return Math.random();", { ...options, seed: 8, onCall: () => {} }).result;
    const c = await sandbox.start("return Math.random();", { ...options, onCall: () => {} }).result;
    expect(a.ok && c.ok && a.value).toBe(c.ok && c.value);
    expect(a.ok && b.ok && a.value).not.toBe(b.ok && b.value);
  });

  it("calls the hooks only once start() has returned, so that onCall may deliver at once", async () => {
    await (sandbox as CodemodeSandboxBase & { warm(): Promise<void> }).warm();
    let seq = 0;
    const run: CodemodeRun = sandbox.start(
      "let s = 0; for (let i = 0; i < 5; i++) s += await tools.lookup(i); return s;",
      {
        ...options,
        onCall: (call) => run.deliver(++seq, options.startedAt, call.id, { ok: true, value: call.args }),
      },
    );
    const result = await run.result;
    expect(result.ok && result.value).toBe(10);
  });

  it("refuses bad deliveries and ends with the signal", async () => {
    const controller = new AbortController();
    let callId = 0;
    const run = sandbox.start("await tools.lookup(1); await tools.lookup(2);", {
      ...options,
      signal: controller.signal,
      onCall: (call) => {
        callId = call.id;
      },
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(() => run.deliver(1, Number.NaN, callId, { ok: true, value: 1 })).toThrow(/finite/);
    expect(() => run.deliver(1, 0, 99, { ok: true, value: 1 })).toThrow(/not waiting/);
    // Result 2 for the only open call would leave no call to carry result 1: the run could never go on.
    expect(() => run.deliver(2, 0, callId, { ok: true, value: 1 })).toThrow(
      "deliver(): result number 2 would leave 1 lower number(s) with no open call to carry them; deliver result 1 first",
    );
    run.deliver(1, 0, callId, { ok: true, value: 1 });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(() => run.deliver(1, 0, callId + 1, { ok: true, value: 1 })).toThrow(/already delivered/);
    controller.abort();
    const result = await run.result;
    expect(!result.ok && result.error.kind).toBe("aborted");
    expect(run.finished).toBe(true);
    expect(() => run.deliver(2, 0, callId + 1, { ok: true, value: 1 })).toThrow(/finished/);
    expect(() => sandbox.start("1", { ...options, seed: -1, onCall: () => {} })).toThrow(/seed/);
    const bad = (extra: object) => () => sandbox.start("1", { ...options, onCall: () => {}, ...extra });
    expect(bad({ signal: {} })).toThrow("signal must be an AbortSignal");
    expect(bad({ onIdle: "later" })).toThrow("onIdle must be a function");
    expect(bad({ onStarted: 1 })).toThrow("onStarted must be a function");
    expect(bad({ onResult: () => {} })).toThrow('start options has no option "onResult"');
  });

  it("refuses tools and globals that would define the same name, naming them", () => {
    const bad = (extra: object) => () => sandbox.start("return 1", { ...options, onCall: () => {}, ...extra });
    expect(
      bad({
        tools: [
          { name: "x", jsName: "y" },
          { name: "y", jsName: "z" },
        ],
      }),
    ).toThrow('tools "x" and "y" would both be tools.y; rename one of them');
    expect(bad({ tools: [{ name: "a-b" }, { name: "c", jsName: "a_b" }] })).toThrow(
      'tools "a-b" and "c" would both be tools.a_b',
    );
    expect(
      bad({
        tools: [
          { name: "a-b", jsName: "p" },
          { name: "a-b", jsName: "q" },
        ],
      }),
    ).toThrow('tools "a-b" and "a-b" would both be tools["a-b"]');
    expect(bad({ globals: [{ name: "f" }, { name: "f" }] })).toThrow('global "f" is declared twice');
    expect(bad({ globals: [{ name: "m.f" }, { name: "m" }] })).toThrow(
      'global "m" conflicts with the namespace of global "m.f"',
    );
    expect(bad({ tools: { lookup: {} } })).toThrow(new TypeError("tools must be an array"));
    expect(bad({ globals: "classify" })).toThrow(new TypeError("globals must be an array"));
    expect(bad({ tools: [{ name: "t", jsName: ["t"] }] })).toThrow('jsName of tool "t" must be a string');
  });

  it("rejects a delivered error inside the script with its properties", async () => {
    const run = sandbox.start("try { await tools.lookup(1); } catch (e) { return [e.message, e.code]; }", {
      ...options,
      onCall: (call) =>
        queueMicrotask(() => run.deliver(1, 0, call.id, { ok: false, message: "nope", properties: { code: 42 } })),
    });
    const result = await run.result;
    expect(result.ok && result.value).toEqual(["nope", 42]);
    expect(result.during).toEqual({ seq: 1, issued: 1 });
  });

  it("reads clock values from 0 to MAX_CLOCK_MS exactly and refuses the ones that would wrap", async () => {
    const clock = "const a = Date.now(); await tools.lookup(1); return [a, Date.now()];";
    for (const at of [0, MAX_CLOCK_MS]) {
      const run = sandbox.start(clock, {
        ...options,
        startedAt: at,
        onCall: (call) => setTimeout(() => run.deliver(1, MAX_CLOCK_MS, call.id, { ok: true, value: 1 })),
      });
      const result = await run.result;
      expect(result.ok && result.value).toEqual([at, MAX_CLOCK_MS]);
    }
    for (const startedAt of [-1000, MAX_CLOCK_MS + 1, 8.64e15]) {
      expect(() => sandbox.start(clock, { ...options, startedAt, onCall: () => {} })).toThrow(
        new RangeError(
          `startedAt must be between 0 and ${MAX_CLOCK_MS} ms since the epoch (1970 to 2554), got ${startedAt}`,
        ),
      );
    }
    let callId = 0;
    let called!: () => void;
    const waiting = new Promise<void>((resolve) => {
      called = resolve;
    });
    const run = sandbox.start(clock, {
      ...options,
      onCall: (call) => {
        callId = call.id;
        called();
      },
    });
    // Until the call is there (a remote VM's call takes its time on a busy machine).
    await waiting;
    for (const now of [-1, MAX_CLOCK_MS + 1]) {
      expect(() => run.deliver(1, now, callId, { ok: true, value: 1 })).toThrow(`now must be a finite number of ms`);
    }
    run.deliver(1, 0, callId, { ok: true, value: 1 });
    expect((await run.result).ok).toBe(true);
  });

  it("never calls a hook inside deliver(), so a hook may count its deliveries after making them", async () => {
    let seq = 0;
    const run: CodemodeRun = sandbox.start(
      "let s = 0; for (let i = 0; i < 3; i++) s += await tools.lookup(i); return s;",
      {
        ...options,
        onCall: (call) => {
          // Inline, this delivery ran the VM at once and called onCall for the next call before seq moved on.
          run.deliver(seq + 1, options.startedAt, call.id, { ok: true, value: 10 });
          seq++;
        },
      },
    );
    expect(await run.result).toMatchObject({ ok: true, value: 30 });
  });

  it("answers thousands of calls delivered from onCall without growing the stack", async () => {
    let seq = 0;
    const run: CodemodeRun = sandbox.start(
      "let n = 0; for (let i = 0; i < 4000; i++) n += await tools.lookup(i); return n;",
      { ...options, onCall: (call) => run.deliver(++seq, options.startedAt, call.id, { ok: true, value: 1 }) },
    );
    // Inline, each delivery nested the next call's turn in the last one's: the stack overflowed near 1,700 calls.
    expect(await run.result).toMatchObject({ ok: true, value: 4000 });
  });

  it("replays results recorded out of order from inside onCall: calls issued in one turn are all known to it", async () => {
    const code =
      "const [a, b, c] = await Promise.all([tools.lookup(1), tools.lookup(2), tools.lookup(3)]); return [a, b, c];";
    // Call 1 got result number 3, call 2 number 1, call 3 number 2.
    const recorded = new Map([
      [1, 3],
      [2, 1],
      [3, 2],
    ]);
    const run: CodemodeRun = sandbox.start(code, {
      ...options,
      onCall: (call) => {
        const seq = recorded.get(call.id) as number;
        run.deliver(seq, options.startedAt + seq, call.id, { ok: true, value: call.id * 10 });
      },
    });
    expect(await run.result).toMatchObject({ ok: true, value: [10, 20, 30] });
  });

  it("runs nothing for a TypeScript script that does not parse: no hook, and finished with its error", async () => {
    const typed = make({ typescript: true });
    try {
      const hooks: string[] = [];
      const run = typed.start("const x: number = ;", {
        ...options,
        onStarted: () => hooks.push("onStarted"),
        onCall: () => hooks.push("onCall"),
      });
      // Its types are stripped on the strip thread first: not finished until that answers.
      expect(run.finished).toBe(false);
      const result = await run.result;
      // Before, an empty script was launched anyway: onStarted fired, and finished followed that hidden run.
      expect(run.finished).toBe(true);
      expect(!result.ok && result.error.name).toBe("SyntaxError");
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(hooks).toEqual([]);
      expect(() => run.deliver(1, 0, 1, { ok: true, value: 1 })).toThrow(
        "deliver(): the run has not started or has finished",
      );
    } finally {
      await typed.close();
    }
  });

  it("ends the run, and only it, with a sandbox error naming a hook that throws", async () => {
    for (const hook of ["onStarted", "onCall", "onIdle"] as const) {
      const run = sandbox.start("return await tools.lookup(1);", {
        ...options,
        onCall: () => {},
        [hook]: () => {
          throw new Error(`${hook} failed`);
        },
      });
      const result = await run.result;
      expect(!result.ok && result.error).toEqual({
        kind: "sandbox",
        message: `the ${hook} hook threw: ${hook} failed`,
      });
    }
    expect(await sandbox.execute("return 1")).toMatchObject({ ok: true, value: 1 });
  });
});

describe("inline deterministic runs whose hook throws", () => {
  const throwing = {
    startedAt: 0,
    seed: 1,
    onCall: () => {},
    onStarted: () => {
      throw new Error("onStarted failed");
    },
  };

  it("end with the hook's error when the VM is not booted yet", async () => {
    const sandbox = new InlineCodemodeSandbox();
    try {
      const result = await sandbox.start("return 1", throwing).result;
      expect(!result.ok && result.error.message).toBe("the onStarted hook threw: onStarted failed");
    } finally {
      await sandbox.close();
    }
  });

  it("give their VM back", async () => {
    const sandbox = new InlineCodemodeSandbox({ maxVms: 1 });
    try {
      await sandbox.warm();
      for (let i = 0; i < 3; i++) expect((await sandbox.start("return 1", throwing).result).ok).toBe(false);
      expect(await sandbox.execute("return 1", { timeoutMs: 5_000 })).toMatchObject({ ok: true, value: 1 });
    } finally {
      await sandbox.close();
    }
  });
});
