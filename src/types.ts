/** Public types shared by every sandbox, launcher and the declarations renderer. */

export interface CodemodeToolContext {
  /** Aborted when the script finishes (unawaited calls included), times out, is aborted, or the sandbox closes. */
  signal: AbortSignal;
  /**
   * The `caller` the execution was started with (`execute(code, { caller })`), for tools that act for whoever asked
   * for the run (the MCP gateway passes the client's session, to ask its person to approve a call). Absent when none.
   */
  caller?: unknown;
}

/** A JSON Schema document. It shapes declarations for the model; values are not validated against it. */
export type CodemodeJsonSchema = { [key: string]: unknown } | boolean;

export interface CodemodeTool {
  /**
   * Scripts call a tool as `tools.<identifier>(args)` (see `toCodemodeIdentifier`) and as `tools["<name>"](args)`.
   * Globals are called as `<name>(args)` and must be identifiers or `<namespace>.<member>`.
   */
  name: string;
  description?: string;
  /** Schema of the single argument (JSON Schema, or a zod schema for the declarations renderer). */
  inputSchema?: CodemodeJsonSchema | unknown;
  /** Schema of the resolved value. */
  outputSchema?: CodemodeJsonSchema | unknown;
  /** Globals only: `execute` receives all call arguments as an array. */
  spread?: boolean;
  /** Globals only: TypeScript parameter list and return type, for example `(id: string): Promise<Model>`. */
  signature?: string;
  /** `args` is what the script passed after a JSON round trip; the result must be JSON-serializable. */
  execute(args: unknown, context: CodemodeToolContext): Promise<unknown> | unknown;
}

/** One item of a script's output, in the order the script produced it. `data` is base64. */
export type CodemodeOutputItem =
  | { type: "text"; text: string; console?: true }
  | { type: "image"; data: string; mimeType: string };

export type CodemodeCallStatus = "ok" | "error" | "cancelled";

export interface CodemodeCall {
  name: string;
  status: CodemodeCallStatus;
  durationMs: number;
}

export type CodemodeErrorKind = "script" | "timeout" | "aborted" | "sandbox";

export interface CodemodeError {
  kind: CodemodeErrorKind;
  name?: string;
  message: string;
  stack?: string;
}

/** Keys the script changed with `store()`; only successful executions report writes. */
export interface CodemodeStoreWrites {
  set: Record<string, unknown>;
  delete: string[];
}

/** In a deterministic run that the script itself ended: the result being processed then, and the calls issued. */
export interface CodemodeDuring {
  seq: number;
  issued: number;
}

export type CodemodeResult =
  | {
      ok: true;
      value: unknown;
      output: CodemodeOutputItem[];
      calls: CodemodeCall[];
      storeWrites: CodemodeStoreWrites;
      during?: CodemodeDuring;
    }
  | {
      ok: false;
      error: CodemodeError;
      output: CodemodeOutputItem[];
      calls: CodemodeCall[];
      during?: CodemodeDuring;
    };

export interface CodemodeExecuteOptions {
  signal?: AbortSignal;
  /** Overrides the sandbox's default deadline for this execution. */
  timeoutMs?: number;
  /** Values the script reads with `load(key)`; its `store()` calls come back as `result.storeWrites`. */
  store?: Readonly<Record<string, unknown>>;
  /**
   * Called while the script runs, as things arrive on the host, in order and before the result resolves: each output
   * item (text, console line, image; the same items are in `result.output`), and each tool call's start and end. A
   * listener that throws is ignored.
   */
  onProgress?: (event: CodemodeProgressEvent) => void;
  /** Handed to every tool call of the execution as `context.caller`; never reaches the script. */
  caller?: unknown;
}

/** What `onProgress` hears of a run while it runs. */
export type CodemodeProgressEvent =
  | { type: "output"; item: CodemodeOutputItem }
  /** A tool call started. */
  | { type: "call"; name: string }
  /** A tool call ended: answered (`ok`) or failed. A call still open when the run ends is not reported. */
  | { type: "result"; name: string; ok: boolean };

/** A call made by the script of a deterministic run, answered with `CodemodeRun.deliver()`. */
export interface CodemodeHostCall {
  /** The VM's own number for the call: 1, 2, ... in the order the script made its calls. */
  id: number;
  target: "tool" | "global";
  name: string;
  args: unknown;
}

export interface CodemodeDeclaredTool {
  name: string;
  /** The identifier the script uses; default `toCodemodeIdentifier(name)`. */
  jsName?: string;
  description?: string;
}

export interface CodemodeDeclaredGlobal {
  name: string;
  spread?: boolean;
}

/** A call's answer. A rejection becomes an `Error` with `message` carrying the JSON `properties`. */
export type CodemodeOutcome =
  | { ok: true; value: unknown }
  | { ok: false; message: string; properties?: Record<string, unknown> };

export interface CodemodeRunOptions {
  /** The VM clock's start in ms since the epoch. */
  startedAt: number;
  /** Seeds `Math.random()`: an unsigned 32-bit integer. */
  seed: number;
  tools?: CodemodeDeclaredTool[];
  globals?: CodemodeDeclaredGlobal[];
  store?: Readonly<Record<string, unknown>>;
  signal?: AbortSignal;
  /** Deadline of this run in ms; default none. */
  timeoutMs?: number;
  onStarted?(fingerprint: string): void;
  onCall(call: CodemodeHostCall): void;
  onIdle?(seq: number, issued: number): void;
}

export interface CodemodeRun {
  readonly result: Promise<CodemodeResult>;
  readonly finished: boolean;
  deliver(seq: number, now: number, id: number, outcome: CodemodeOutcome): void;
}

export interface CodemodeSandboxBaseOptions {
  tools?: CodemodeTool[];
  /** Host functions callable as top-level names; not recorded in `result.calls`. */
  globals?: CodemodeTool[];
  /** Deadline per execution in ms, tools included. `Infinity` disables it. Default 300,000. */
  timeoutMs?: number;
  /** Heap cap of the VM in bytes; allocations beyond it fail inside the script as out of memory. */
  memoryLimitBytes?: number;
  /**
   * Scripts are TypeScript: types are erased in place before they run (not type-checked), so stack lines and columns
   * still point at the script as written. A TypeScript syntax error is a `script` error with its line.
   */
  typescript?: boolean;
  /**
   * Tool and global calls one execution may make (default `DEFAULT_MAX_TOOL_CALLS`): a call past it rejects in the
   * script with a RangeError naming the limit, and `result.calls` never grows past it.
   */
  maxToolCalls?: number;
  /**
   * Guest memory this sandbox's executions may hold at once, counted by their memory limits; an execution that does
   * not fit waits for others to end (its deadline still counting). Default: the budget all sandboxes of the process
   * share, `DEFAULT_GUEST_MEMORY_SHARE` of the machine's memory.
   */
  maxTotalMemoryBytes?: number;
  /**
   * Interrupt polls a script may compute through, counted as pi-codemode counts them (one every 10,000 of QuickJS's
   * bytecode steps, a call or a backward jump, and one every 50 promise jobs); past it the execution fails with
   * `timeout`. Where clocks stand still while a script computes (Workers), this is the only limit
   * of a script that never awaits. Default: none for the Node sandboxes, `DEFAULT_INTERRUPT_BUDGET` for the remote one
   * and `createInlineCodemodeSandbox`.
   */
  interruptBudget?: number;
}

/** A compiled QuickJS module (pi-codemode's name for it). */
export type CodemodeWasmModule = WebAssembly.Module;
