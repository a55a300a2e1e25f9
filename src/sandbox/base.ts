/**
 * The public sandbox API, shared by every launcher: option checks, the tool registry, `execute`, deterministic
 * `start` runs, and `close`. Subclasses only choose the launcher.
 */

import {
  DEFAULT_MAX_TOOL_CALLS,
  DEFAULT_TIMEOUT_MS,
  MAX_CLOCK_MS,
  MAX_INTERRUPT_BUDGET,
  MAX_TOOL_CALLS,
  MAX_VALUE_CHARS,
} from "../engine/limits.ts";
import { type RunConfiguration, runConfiguration } from "../engine/protocol.ts";
import { Execution } from "../host/execution.ts";
import { type Launcher, type LaunchRequest, launchRequest } from "../host/launcher.ts";
import { budgetFor, type GuestMemoryBudget } from "../host/memory-budget.ts";
import { IdMap } from "../platform/id-map.ts";
import { isIdentifier, toCodemodeIdentifier } from "../platform/identifier.ts";
import { booleanOption, durationOption, integerOption, optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import { startingSandbox } from "../platform/platform.ts";
import { explainScriptError } from "../source/script-errors.ts";
// The one import from a higher layer: TypeScript input is a sandbox option, and erasing types lives with the source format.
import { CodemodeSourceError } from "../source/source-error.ts";
import { StripThreadError, stripTypeScriptOnThread } from "../source/strip-thread.ts";
import { startTrace } from "../tracing/index.ts";
import type {
  CodemodeExecuteOptions,
  CodemodeResult,
  CodemodeRun,
  CodemodeRunOptions,
  CodemodeSandboxBaseOptions,
  CodemodeTool,
} from "../types.ts";

/** Executions `warm()` runs through the host's side of a sandbox (see warmHost). */
export const HOST_WARM_RUNS = 100;
/**
 * Executions after which a sandbox has started (see startingSandbox): its first ones compile the host paths that
 * every execution takes, and those that calls, output and errors take.
 */
const STARTING_EXECUTIONS = 16;
const WARM_TOOL: CodemodeTool = { name: "warm", execute: (n) => n };
const WARM_CONFIGURATION = runConfiguration({
  tools: [{ name: "warm", id: "warm", description: "" }],
  globals: [],
  deterministic: false,
  program: false,
});

/** Default heap cap of a VM. */
export const DEFAULT_MEMORY_LIMIT_BYTES = 256 * 1024 * 1024;
/** Smallest heap cap accepted: the script environment itself needs about half of it. */
export const MIN_MEMORY_LIMIT_BYTES = 1024 * 1024;
/** Largest heap cap accepted: a wasm32 memory's 4 GiB. */
export const MAX_MEMORY_LIMIT_BYTES = 2 ** 32;

/** Names the script environment defines itself; globals may not take them. */
const RESERVED_GLOBALS = new Set([
  "tools",
  "ALL_TOOLS",
  "console",
  "text",
  "image",
  "exit",
  "store",
  "load",
  "globalThis",
  "eval",
  "Function",
  "Object",
  "Array",
  "JSON",
  "Math",
  "Promise",
  "Reflect",
  "Proxy",
  "Symbol",
  "Error",
  "Date",
  "RegExp",
  "Map",
  "Set",
  "WeakMap",
  "WeakSet",
  "String",
  "Number",
  "Boolean",
  "BigInt",
  "undefined",
  "NaN",
  "Infinity",
  "__proto__",
  "constructor",
  "prototype",
  "performance",
  "queueMicrotask",
]);

/**
 * What executions see of the registry, built once per change of it: the tools and globals an execution keeps for its
 * whole run, and the configuration its VM is set up with.
 */
interface RegistryView {
  tools: ReadonlyMap<string, CodemodeTool>;
  globals: ReadonlyMap<string, CodemodeTool>;
  configuration: RunConfiguration;
}

export abstract class CodemodeSandboxBase {
  private readonly toolMap = new Map<string, CodemodeTool>();
  /** The registered tools' names by identifier (`tools.<id>`), so that a new tool is checked at once. */
  private readonly toolIds = new Map<string, string>();
  private readonly globalMap = new Map<string, CodemodeTool>();
  private view: RegistryView | undefined;
  /** Open executions by a number of their own (an IdMap: see id-map.ts), so that close() stops them. */
  private readonly executions = new IdMap<Execution>();
  private lastExecution = 0;
  private readonly timeoutMs: number;
  private readonly memoryLimitBytes: number;
  private readonly maxToolCalls: number;
  private readonly interruptBudget: number | null;
  private readonly typescript: boolean;
  private closed = false;
  private closing: Promise<void> | undefined;
  /** Ends the sandbox's start, after STARTING_EXECUTIONS executions, warm() or close(). */
  private readonly endStart: () => void = () => {};
  private executionsEnded = 0;

  protected constructor(
    options: CodemodeSandboxBaseOptions,
    protected readonly launcher: Launcher,
  ) {
    try {
      checkOptions(options);
      this.timeoutMs = durationOption(options.timeoutMs, "timeoutMs", true) ?? DEFAULT_TIMEOUT_MS;
      this.memoryLimitBytes = memoryOption(options.memoryLimitBytes, "memoryLimitBytes") ?? DEFAULT_MEMORY_LIMIT_BYTES;
      this.maxToolCalls =
        integerOption(options.maxToolCalls, "maxToolCalls", 1, MAX_TOOL_CALLS) ?? DEFAULT_MAX_TOOL_CALLS;
      this.interruptBudget = integerOption(options.interruptBudget, "interruptBudget", 1, MAX_INTERRUPT_BUDGET) ?? null;
      booleanOption(options.typescript, "typescript");
      this.typescript = options.typescript ?? false;
      checkLists(options);
      for (const tool of options.tools ?? []) this.registerTool(tool);
      for (const global of options.globals ?? []) this.addGlobal(global);
      this.endStart = startingSandbox();
    } catch (error) {
      // The launcher is already starting (workers, children, VMs): it must not outlive the error, nor keep the host
      // process alive.
      void launcher.close();
      throw error;
    }
  }

  /** The registered tools, for `renderDeclarations`. */
  get tools(): CodemodeTool[] {
    return [...this.toolMap.values()];
  }

  get globals(): CodemodeTool[] {
    return [...this.globalMap.values()];
  }

  /**
   * Adds a tool for the executions that start afterwards. Its name and description are read now; `execute` is
   * looked up on each call.
   */
  registerTool(tool: CodemodeTool): void {
    this.toolIds.set(checkNewTool(tool, this.toolIds), tool.name);
    this.toolMap.set(tool.name, tool);
    this.view = undefined;
  }

  /** Removes a tool; running executions that call it get an error. Returns whether it was registered. */
  unregisterTool(name: string): boolean {
    this.view = undefined;
    const tool = this.toolMap.get(name);
    if (tool === undefined) return false;
    this.toolIds.delete(toCodemodeIdentifier(tool.name));
    return this.toolMap.delete(name);
  }

  private addGlobal(global: CodemodeTool): void {
    checkTool(global, "global");
    const parts = global.name.split(".");
    if (parts.length > 2 || !parts.every(isIdentifier) || parts.some((p) => RESERVED_GLOBALS.has(p))) {
      throw new Error(
        `Invalid global "${global.name}": a global must be an identifier or namespace.member, and may not take a name the script environment uses`,
      );
    }
    if (this.globalMap.has(global.name)) throw new Error(`a global named "${global.name}" is already registered`);
    const other = collidingGlobal(global.name, this.globalMap.keys());
    if (other !== undefined)
      throw new Error(`global "${global.name}" conflicts with the namespace of global "${other}"`);
    this.globalMap.set(global.name, global);
    this.view = undefined;
  }

  private registryView(): RegistryView {
    if (!this.view) {
      this.view = {
        tools: new Map(this.toolMap),
        globals: new Map(this.globalMap),
        configuration: runConfiguration({
          tools: [...this.toolMap.values()].map((t) => ({
            name: t.name,
            id: toCodemodeIdentifier(t.name),
            description: t.description ?? "",
          })),
          globals: [...this.globalMap.values()].map((g) => ({ name: g.name, spread: g.spread === true })),
          deterministic: false,
          program: false,
        }),
      };
    }
    return this.view;
  }

  /**
   * Runs `code` (the body of an async function). Never rejects for script failures (see `CodemodeResult`); rejects
   * for bad arguments and once the sandbox is closed.
   */
  async execute(code: string, options: CodemodeExecuteOptions = {}): Promise<CodemodeResult> {
    if (typeof code !== "string") throw new TypeError("code must be a string");
    if (options === null || typeof options !== "object") throw new TypeError("execute options must be an object");
    refuseUnknownOptions(options, "execute options", EXECUTE_OPTION_KEYS);
    const timeoutMs = durationOption(options.timeoutMs, "options.timeoutMs", true) ?? this.timeoutMs;
    checkSignal(options.signal);
    if (options.onProgress !== undefined && typeof options.onProgress !== "function") {
      throw new TypeError("onProgress must be a function");
    }
    const store = encodeStore(options.store);
    if (this.closed) throw this.closedError("execute");
    const script = this.typescript ? await this.compile(code) : code;
    if (typeof script !== "string") return script;
    if (this.closed) return closedWhileCompiling();
    // The execution keeps the tools it started with; registering or removing tools affects later executions only.
    const view = this.registryView();
    const request = this.request(script, store, timeoutMs, null, view.configuration);
    // A span for the execution, and one for each tool call, when a tracer records (see tracing/).
    const trace = startTrace("airlock.execute", { "airlock.sandbox": this.constructor.name });
    const id = ++this.lastExecution;
    const execution = new Execution(this.launcher, {
      request,
      handler: {
        kind: "tools",
        caller: options.caller,
        resolve: (target, name) => {
          const tool = (target === "tool" ? view.tools : view.globals).get(name);
          return trace === undefined || tool === undefined || target !== "tool" ? tool : trace.tool(tool);
        },
      },
      signal: options.signal,
      timeoutMs,
      onProgress: options.onProgress,
      onStart: (e) => this.executions.set(id, e),
      onEnd: () => this.executions.delete(id),
    });
    const result = execution.result.then((result) => {
      if (++this.executionsEnded === STARTING_EXECUTIONS) this.endStart();
      return explained(result, code);
    });
    if (trace === undefined) return result;
    return result.then((result) => {
      trace.end({
        ok: result.ok,
        ...(result.ok ? {} : { error: result.error.kind }),
        attributes: { "airlock.tool_calls": result.calls.length },
      });
      return result;
    });
  }

  /**
   * Runs `code` deterministically: the run declares its tools and globals, the host answers every call with
   * `deliver(seq, now, id, outcome)`, and the same inputs and results always give the same calls, output and value.
   */
  start(code: string, options: CodemodeRunOptions): CodemodeRun {
    if (typeof code !== "string") throw new TypeError("code must be a string");
    if (options === null || typeof options !== "object") throw new TypeError("start options must be an object");
    refuseUnknownOptions(options, "start options", RUN_OPTION_KEYS);
    if (typeof options.startedAt !== "number" || !Number.isFinite(options.startedAt)) {
      throw new TypeError("startedAt must be a finite number of ms since the epoch");
    }
    if (options.startedAt < 0 || options.startedAt > MAX_CLOCK_MS) {
      throw new RangeError(
        `startedAt must be between 0 and ${MAX_CLOCK_MS} ms since the epoch (1970 to 2554), got ${options.startedAt}`,
      );
    }
    if (!Number.isInteger(options.seed) || options.seed < 0 || options.seed > 0xffffffff) {
      throw new TypeError("seed must be an unsigned 32-bit integer");
    }
    if (typeof options.onCall !== "function") throw new TypeError("onCall must be a function");
    for (const hook of ["onStarted", "onIdle"] as const) {
      if (options[hook] !== undefined && typeof options[hook] !== "function") {
        throw new TypeError(`${hook} must be a function`);
      }
    }
    checkSignal(options.signal);
    const timeoutMs = durationOption(options.timeoutMs, "timeoutMs", true) ?? Number.POSITIVE_INFINITY;
    const store = encodeStore(options.store);
    if (this.closed) throw this.closedError("start");
    checkLists(options);
    // A tool is both tools.<id> and tools[<name>]: no two tools may define the same property.
    const claimed = new Map<string, string>();
    const tools = (options.tools ?? []).map((t) => {
      if (!t || typeof t.name !== "string" || t.name === "") throw new TypeError("every tool needs a name");
      if (t.jsName !== undefined && typeof t.jsName !== "string") {
        throw new TypeError(`jsName of tool "${t.name}" must be a string`);
      }
      if (t.description !== undefined && typeof t.description !== "string") {
        throw new TypeError(`tool "${t.name}" has a description that is not a string`);
      }
      const id = t.jsName ?? toCodemodeIdentifier(t.name);
      if (!isIdentifier(id)) throw new TypeError(`jsName "${id}" of tool "${t.name}" is not an identifier`);
      for (const key of new Set([id, t.name])) {
        const other = claimed.get(key);
        if (other !== undefined) {
          const property = isIdentifier(key) ? `tools.${key}` : `tools[${JSON.stringify(key)}]`;
          throw new Error(`tools "${other}" and "${t.name}" would both be ${property}; rename one of them`);
        }
        claimed.set(key, t.name);
      }
      return { name: t.name, id, description: t.description ?? "" };
    });
    const globalNames: string[] = [];
    const globals = (options.globals ?? []).map((g) => {
      const parts = typeof g?.name === "string" ? g.name.split(".") : [];
      if (
        parts.length < 1 ||
        parts.length > 2 ||
        !parts.every(isIdentifier) ||
        parts.some((p) => RESERVED_GLOBALS.has(p))
      ) {
        throw new TypeError(
          `Invalid global "${g?.name}": a global must be an identifier or namespace.member not used by the environment`,
        );
      }
      const other = collidingGlobal(g.name, globalNames);
      if (other === g.name) throw new Error(`global "${g.name}" is declared twice`);
      if (other !== undefined) throw new Error(`global "${g.name}" conflicts with the namespace of global "${other}"`);
      globalNames.push(g.name);
      return { name: g.name, spread: g.spread === true };
    });
    const configuration = runConfiguration({ tools, globals, deterministic: true, program: false });
    let execution: Execution | undefined;
    const launch = (script: string): Promise<CodemodeResult> => {
      const id = ++this.lastExecution;
      execution = new Execution(this.launcher, {
        request: this.request(
          script,
          store,
          timeoutMs,
          { startedAt: options.startedAt, seed: options.seed },
          configuration,
        ),
        handler: {
          kind: "deterministic",
          // Checked on the host too: the run's calls are of these names, whatever the VM side sends.
          declared: { tools: new Set(tools.map((t) => t.name)), globals: new Set(globalNames) },
          onStarted: options.onStarted,
          onCall: options.onCall,
          onIdle: options.onIdle,
        },
        signal: options.signal,
        timeoutMs,
        onStart: (e) => this.executions.set(id, e),
        onEnd: () => this.executions.delete(id),
      });
      return execution.result.then((ended) => explained(ended, code));
    };
    // A TypeScript script runs once its types are stripped; one that does not strip has its result without running,
    // and no hook is called.
    let compiling = this.typescript;
    const result = this.typescript
      ? this.compile(code).then((script) => {
          compiling = false;
          if (typeof script !== "string") return script;
          return this.closed ? closedWhileCompiling() : launch(script);
        })
      : launch(code);
    return {
      result,
      get finished() {
        return execution?.finished ?? !compiling;
      },
      deliver: (seq, now, id, outcome) => {
        if (!execution) throw new Error("deliver(): the run has not started or has finished");
        execution.deliver(seq, now, id, outcome);
      },
    };
  }

  /**
   * Stops every open execution (they end with `aborted`) and releases the sandbox's threads and VMs. Every call returns
   * the same promise, so that none resolves before the release is done.
   */
  close(): Promise<void> {
    if (!this.closing) {
      this.closed = true;
      this.endStart();
      for (const execution of [...this.executions.values()]) execution.stop("aborted", "Sandbox closed");
      this.closing = this.launcher.close();
    }
    return this.closing;
  }

  /**
   * Runs `HOST_WARM_RUNS` small executions through the whole host path (this sandbox's launcher, the execution, the
   * calls), so that the first executions a caller makes after `warm()` do not run on cold code. Called by `warm()`;
   * every call shares the first one's runs, so that a second `warm()` returns only once the host is warm.
   */
  protected warmHost(): Promise<void> {
    this.hostWarming ??= this.runHostWarm();
    return this.hostWarming;
  }

  private hostWarming: Promise<void> | undefined;

  /** The configuration `warm()` primes the VM sides with: the tools and globals registered now. */
  protected warmConfiguration(): RunConfiguration {
    return this.registryView().configuration;
  }

  private async runHostWarm(): Promise<void> {
    for (let i = 0; i < HOST_WARM_RUNS && !this.closed; i++) {
      const id = ++this.lastExecution;
      const execution = new Execution(this.launcher, {
        request: launchRequest({
          code: 'let t = 0; for (let i = 0; i < 3; i++) t += await tools.warm(i); text("w" + t); return t;',
          configuration: WARM_CONFIGURATION,
          memoryLimitBytes: this.memoryLimitBytes,
          maxCalls: 16,
        }),
        handler: { kind: "tools", resolve: (target) => (target === "tool" ? WARM_TOOL : undefined) },
        signal: undefined,
        timeoutMs: Number.POSITIVE_INFINITY,
        onStart: (e) => this.executions.set(id, e),
        onEnd: () => this.executions.delete(id),
      });
      await execution.result;
    }
    // Warm, the host paths are compiled: the sandbox has started.
    this.endStart();
  }

  /** What `execute()` and `start()` throw once the sandbox is closed (pi-codemode's callers expect a rejection). */
  private closedError(method: string): Error {
    return new Error(`${method}(): this ${this.constructor.name} is closed; create a new sandbox to run more scripts`);
  }

  /**
   * The JavaScript of a TypeScript script, its types stripped on the strip thread (host/typescript-thread.ts), or
   * the failed result of one that does not strip: a script error, or a sandbox error when the thread cannot start.
   */
  private async compile(code: string): Promise<string | CodemodeResult> {
    try {
      return await stripTypeScriptOnThread(code);
    } catch (error) {
      if (error instanceof StripThreadError) {
        return { ok: false, error: { kind: "sandbox", message: error.message }, output: [], calls: [] };
      }
      if (!(error instanceof CodemodeSourceError)) throw error;
      const where = error.line === undefined ? "" : `\n    at codemode.js:${error.line}:${error.column ?? 1}`;
      return {
        ok: false,
        error: {
          kind: "script",
          name: "SyntaxError",
          message: error.message,
          stack: `SyntaxError: ${error.message}${where}`,
        },
        output: [],
        calls: [],
      };
    }
  }

  private request(
    code: string,
    store: Record<string, string>,
    timeoutMs: number,
    deterministic: LaunchRequest["deterministic"],
    configuration: RunConfiguration,
  ): LaunchRequest {
    return launchRequest({
      code,
      configuration,
      store,
      memoryLimitBytes: this.memoryLimitBytes,
      deadline: Number.isFinite(timeoutMs) ? Date.now() + timeoutMs : null,
      interruptBudget: this.interruptBudget,
      maxCalls: this.maxToolCalls,
      deterministic,
    });
  }
}

/** The result of an execution whose sandbox closed while its TypeScript was stripped, as an open one's would be. */
function closedWhileCompiling(): CodemodeResult {
  return { ok: false, error: { kind: "aborted", message: "Sandbox closed" }, output: [], calls: [] };
}

/** A failed result with its engine-worded error explained from the script's own lines (see script-errors.ts). */
function explained(result: CodemodeResult, code: string): CodemodeResult {
  if (result.ok) return result;
  const error = explainScriptError(result.error, code);
  return error === result.error ? result : { ...result, error };
}

/**
 * Throws unless `tool` can join the `registered` tools (their names by identifier): well-formed, with a name and a
 * `tools.<name>` of its own; returns its identifier. Exported so that `airlock declarations` refuses the tool lists a
 * sandbox refuses, with the same messages.
 */
export function checkNewTool(tool: CodemodeTool, registered: ReadonlyMap<string, string>): string {
  checkTool(tool, "tool");
  // A name has one identifier, so a name registered already is found under the new tool's.
  const id = toCodemodeIdentifier(tool.name);
  const other = registered.get(id);
  if (other === tool.name) throw new Error(`a tool named "${tool.name}" is already registered`);
  if (other !== undefined) {
    throw new Error(`tools "${other}" and "${tool.name}" would both be tools.${id}; rename one of them`);
  }
  return id;
}

/** Throws unless `tools` and `globals`, where given, are arrays (a sandbox's own, or a deterministic run's). */
function checkLists(options: { tools?: unknown; globals?: unknown }): void {
  if (options.tools !== undefined && !Array.isArray(options.tools)) throw new TypeError("tools must be an array");
  if (options.globals !== undefined && !Array.isArray(options.globals)) throw new TypeError("globals must be an array");
}

/**
 * The global among `others` that `name` would collide with: the same name, or the same top-level name where either is
 * not in a namespace (`f` and `f.g`).
 */
function collidingGlobal(name: string, others: Iterable<string>): string | undefined {
  const top = name.split(".")[0];
  for (const other of others) {
    if (other === name || (other.split(".")[0] === top && (!name.includes(".") || !other.includes(".")))) return other;
  }
  return undefined;
}

function checkTool(tool: CodemodeTool, what: string): void {
  if (tool === null || typeof tool !== "object") throw new TypeError(`a ${what} must be an object`);
  if (typeof tool.name !== "string" || tool.name === "") throw new TypeError(`every ${what} needs a non-empty name`);
  if (typeof tool.execute !== "function") throw new TypeError(`${what} "${tool.name}" has no execute function`);
  if (tool.description !== undefined && typeof tool.description !== "string") {
    throw new TypeError(`${what} "${tool.name}" has a description that is not a string`);
  }
}

/** Options every sandbox takes (CodemodeSandboxBaseOptions). */
const BASE_OPTION_KEYS = optionKeys<CodemodeSandboxBaseOptions>({
  tools: true,
  globals: true,
  timeoutMs: true,
  memoryLimitBytes: true,
  typescript: true,
  maxToolCalls: true,
  maxTotalMemoryBytes: true,
  interruptBudget: true,
});
const EXECUTE_OPTION_KEYS = optionKeys<CodemodeExecuteOptions>({
  signal: true,
  timeoutMs: true,
  store: true,
  onProgress: true,
  caller: true,
});

/**
 * Throws unless the options argument of a sandbox constructor is an object, checked before any option is read; with
 * `own` (the sandbox's options besides the base ones), also refuses any other key: a misspelt `timeout` must not
 * leave the default deadline in place unnoticed.
 */
export function checkOptions(options: unknown, sandbox?: string, own: readonly string[] = []): void {
  if (options === null || typeof options !== "object") throw new TypeError("sandbox options must be an object");
  if (sandbox !== undefined) refuseUnknownOptions(options, sandbox, [...BASE_OPTION_KEYS, ...own]);
}

const RUN_OPTION_KEYS = optionKeys<CodemodeRunOptions>({
  startedAt: true,
  seed: true,
  tools: true,
  globals: true,
  store: true,
  signal: true,
  timeoutMs: true,
  onStarted: true,
  onCall: true,
  onIdle: true,
});

function checkSignal(signal: unknown): void {
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw new TypeError("signal must be an AbortSignal");
}

/**
 * The guest-memory budget of a sandbox (see CodemodeSandboxBaseOptions.maxTotalMemoryBytes): checked before the
 * launcher that uses it is made.
 */
export function budgetOption(options: CodemodeSandboxBaseOptions): GuestMemoryBudget {
  return budgetFor(integerOption(options.maxTotalMemoryBytes, "maxTotalMemoryBytes", MIN_MEMORY_LIMIT_BYTES, Infinity));
}

/** A VM's memory limit (`memoryLimitBytes`, the remote end's `maxMemoryLimitBytes`). */
export function memoryOption(value: unknown, name: string): number | undefined {
  return integerOption(value, name, MIN_MEMORY_LIMIT_BYTES, MAX_MEMORY_LIMIT_BYTES);
}

function encodeStore(store: Readonly<Record<string, unknown>> | undefined): Record<string, string> {
  const encoded: Record<string, string> = {};
  if (store === undefined) return encoded;
  if (store === null || typeof store !== "object" || Array.isArray(store)) {
    throw new TypeError("store must be an object of JSON values");
  }
  let total = 0;
  for (const key of Object.keys(store)) {
    const value = store[key];
    if (value === undefined) continue;
    let json: string | undefined;
    try {
      json = JSON.stringify(value);
    } catch (error) {
      throw new TypeError(`store["${key}"] is not JSON-serializable: ${(error as Error).message}`);
    }
    if (json === undefined) throw new TypeError(`store["${key}"] is not JSON-serializable`);
    if (json.length > MAX_VALUE_CHARS)
      throw new RangeError(`store["${key}"] is more than ${MAX_VALUE_CHARS} characters of JSON (MAX_VALUE_CHARS)`);
    // The whole store enters the VM as one JSON value, so it is held to the same limit as one value.
    total += key.length + json.length;
    if (total > MAX_VALUE_CHARS) {
      throw new RangeError(`the store is more than ${MAX_VALUE_CHARS} characters of JSON (MAX_VALUE_CHARS)`);
    }
    Object.defineProperty(encoded, key, { value: json, enumerable: true, writable: true, configurable: true });
  }
  return encoded;
}
