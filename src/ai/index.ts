/**
 * `airlock-codemode/ai`: code mode for the AI SDK. `createCodeTool({ tools })` turns a set of AI SDK tools into one tool whose
 * description declares them in TypeScript and whose input is a program that calls them as `tools.<name>(args)`.
 */
import { asSchema, type Tool, type ToolExecutionOptions, tool } from "ai";
import { z } from "zod";
import { describeTool, INDEX_THRESHOLD_TOOLS, renderDeclarations } from "../declarations/index.ts";
import { isZodSchema } from "../declarations/zod.ts";
import { toCodemodeIdentifier } from "../platform/identifier.ts";
import { durationOption, optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import type { CodemodeSandboxBase } from "../sandbox/base.ts";
import { CodemodeSourceError, parseCodemodeSource } from "../source/index.ts";
import { stripTypeScriptOnThread } from "../source/strip-thread.ts";
import type {
  CodemodeDeclaredTool,
  CodemodeError,
  CodemodeHostCall,
  CodemodeOutputItem,
  CodemodeResult,
} from "../types.ts";
import { CodemodeSandbox } from "../worker/sandbox.ts";

/** What `toModelOutput` returns (the AI SDK does not export the type by name). */
type ToolResultOutput = Awaited<ReturnType<NonNullable<Tool["toModelOutput"]>>>;

/** Default deadline of one run of the model's program. */
export const DEFAULT_CODE_TOOL_TIMEOUT_MS = 60_000;

/** In a `description` template: where the tools' TypeScript declarations go. */
export const CODE_TOOL_TYPES_PLACEHOLDER = "{{types}}";
/** In a `description` template: where the rules of the program (its environment, the options line) go. */
export const CODE_TOOL_RULES_PLACEHOLDER = "{{rules}}";

/**
 * A failed run of the model's program (`failedRuns: "tool-error"`, the default): thrown from `execute`, so that the
 * AI SDK reports a `tool-error` and hands the model the message (the error's kind, message and stack lines, and
 * the text printed before it). `result` is the run as `failedRuns: "result"` would have returned it.
 */
export class CodeToolError extends Error {
  override name = "CodeToolError";
  constructor(
    message: string,
    readonly result: Extract<CodeToolResult, { ok: false }>,
  ) {
    super(message);
  }
}

export interface CreateCodeToolOptions {
  /** The AI SDK tools the program may call, by name (as `generateText` takes them). */
  tools: Record<string, Tool>;
  /**
   * The sandbox that runs the programs; nothing is registered on it. Default: a worker-pool sandbox of one thread,
   * created on the first run and released by `close()`.
   */
  sandbox?: CodemodeSandboxBase;
  /** Deadline of one run in ms (finite), tool calls included; a program's `timeout_ms` can only lower it. */
  timeoutMs?: number;
  /**
   * The tool's description. As a template (it holds `{{types}}`): the whole description, with `{{types}}` replaced by
   * the tools' declarations and `{{rules}}` (if present) by the rules of the program. Otherwise it replaces the first
   * paragraph (what the tool is for), and the rules and declarations follow.
   */
  description?: string;
  /**
   * How a failed run (a script error, a timeout, an abort) comes back: `"tool-error"` (default) throws a
   * `CodeToolError` from `execute`, as the AI SDK's conventions have it (its `tool-error` and `output-error` states);
   * `"result"` returns `{ ok: false, output, error }` as an ordinary result.
   */
  failedRuns?: "tool-error" | "result";
}

/** What one run gives back: the output in order and the returned value, or the error. */
export type CodeToolResult =
  | { ok: true; output: CodemodeOutputItem[]; value?: unknown }
  | { ok: false; output: CodemodeOutputItem[]; error: CodemodeError };

/** The code tool: an AI SDK tool, plus its declarations and a `close()` for the sandbox it created. */
export type CodeTool = Tool<{ code: string }, CodeToolResult> & {
  /** The TypeScript declarations of the tools, as the description carries them. */
  readonly declarations: string;
  /** Releases the sandbox the tool created (a sandbox passed in is left open). */
  close(): Promise<void>;
};

interface Callable {
  name: string;
  id: string;
  tool: Tool;
}

/**
 * One AI SDK tool for a set of AI SDK tools. Tools without `execute` (client-side or provider-executed) are left out;
 * a tool with `needsApproval` is refused, since a program cannot stop for an approval. Arguments a program passes are validated with
 * the tool's own input schema before its `execute` runs; each call gets the code tool's `messages`, `abortSignal`
 * (aborted too when the program ends first) and `experimental_context`, and a `toolCallId` of the form
 * `<code tool call id>/<n>`.
 */
export function createCodeTool(options: CreateCodeToolOptions): CodeTool {
  if (options === null || typeof options !== "object" || options.tools === null || typeof options.tools !== "object") {
    throw new TypeError("createCodeTool({ tools }) needs an object of AI SDK tools");
  }
  refuseUnknownOptions(
    options,
    "createCodeTool",
    optionKeys<CreateCodeToolOptions>({
      tools: true,
      sandbox: true,
      timeoutMs: true,
      description: true,
      failedRuns: true,
    }),
  );
  const failedRuns = options.failedRuns ?? "tool-error";
  if (failedRuns !== "tool-error" && failedRuns !== "result") {
    throw new TypeError(`failedRuns must be "tool-error" or "result", got ${JSON.stringify(failedRuns)}`);
  }
  if (options.description !== undefined && typeof options.description !== "string") {
    throw new TypeError("description must be a string");
  }
  // Finite: the model is told the deadline in ms, and a code tool without one would let a program run forever.
  const timeoutMs = durationOption(options.timeoutMs, "timeoutMs", false) ?? DEFAULT_CODE_TOOL_TIMEOUT_MS;
  const callable = selectTools(options.tools);
  const byName = new Map(callable.map((entry) => [entry.name, entry]));
  const catalog = callable.map(toToolLike);
  // What every program declares to its sandbox: the same for all of them, so built once.
  const declared = callable.map((entry) => ({
    name: entry.name,
    jsName: entry.id,
    description: entry.tool.description ?? "",
  }));
  // A large catalog is declared as an index; programs then get describeTool() to read a tool's full declaration.
  const indexed = catalog.length > INDEX_THRESHOLD_TOOLS;
  const declarations = indexed
    ? `${renderDeclarations({ tools: catalog }, { indexHint: INDEX_HINT })}\n\n${DESCRIBE_TOOL_DECLARATION}`
    : renderDeclarations({ tools: catalog });
  let ownSandbox: CodemodeSandbox | undefined;
  const sandbox = () => {
    if (options.sandbox) return options.sandbox;
    ownSandbox ??= new CodemodeSandbox({ poolSize: 1, timeoutMs });
    return ownSandbox;
  };

  const codeTool = tool({
    description: describe(options.description, declarations, timeoutMs),
    inputSchema: z.object({
      code: z.string().describe("The program: the body of an async function, in JavaScript or TypeScript"),
    }),
    execute: async ({ code }, context) => {
      const result = await run(
        sandbox(),
        code,
        { byName, declared, describe: indexed ? (name) => describeTool(catalog, name) : undefined },
        timeoutMs,
        context,
      );
      if (result.ok || failedRuns === "result") return result;
      throw new CodeToolError(errorText(result), result);
    },
    // AI SDK 5 passes the tool's output itself; 6 and 7 pass { toolCallId, input, output }.
    toModelOutput: (options) => {
      const given: unknown = options;
      return isCodeToolResult(given)
        ? toModelOutput(given, "media")
        : toModelOutput((given as { output: CodeToolResult }).output, "image-data");
    },
  });
  return Object.assign(codeTool, {
    declarations,
    async close() {
      await ownSandbox?.close();
      ownSandbox = undefined;
    },
  }) as CodeTool;
}

function selectTools(tools: Record<string, Tool>): Callable[] {
  const seen = new Map<string, string>();
  const out: Callable[] = [];
  for (const [name, entry] of Object.entries(tools)) {
    if (entry === null || typeof entry !== "object") throw new TypeError(`tool "${name}" is not an AI SDK tool`);
    if (typeof entry.execute !== "function" || entry.type === "provider") continue;
    if (entry.needsApproval !== undefined && entry.needsApproval !== false) {
      throw new Error(
        `tool "${name}" has needsApproval, which a program cannot stop for: leave it out of createCodeTool's tools and offer it to the model directly`,
      );
    }
    const id = toCodemodeIdentifier(name);
    const other = seen.get(id);
    if (other !== undefined) throw new Error(`tools "${other}" and "${name}" would both be tools.${id}; rename one`);
    seen.set(id, name);
    out.push({ name, id, tool: entry });
  }
  return out;
}

/** What the declarations renderer reads: zod schemas as they are, other schemas as their JSON Schema. */
function toToolLike({ name, tool: entry }: Callable) {
  const output = (entry as { outputSchema?: unknown }).outputSchema;
  return {
    name,
    ...(entry.description === undefined ? {} : { description: entry.description }),
    inputSchema: schemaForDeclarations(entry.inputSchema),
    ...(output === undefined ? {} : { outputSchema: schemaForDeclarations(output) }),
  };
}

function schemaForDeclarations(schema: unknown): unknown {
  if (schema === undefined || isZodSchema(schema)) return schema;
  try {
    const json = asSchema(schema as Parameters<typeof asSchema>[0]).jsonSchema;
    // A schema whose JSON Schema is only known asynchronously is declared as `unknown`.
    return typeof (json as PromiseLike<unknown>)?.then === "function" ? undefined : json;
  } catch {
    return undefined;
  }
}

function describe(given: string | undefined, declarations: string, timeoutMs: number): string {
  const types = declarations === "" ? "declare const tools: {};" : declarations;
  if (given?.includes(CODE_TOOL_TYPES_PLACEHOLDER)) {
    return given
      .replaceAll(CODE_TOOL_TYPES_PLACEHOLDER, types)
      .replaceAll(CODE_TOOL_RULES_PLACEHOLDER, rules(timeoutMs).join("\n"));
  }
  const first =
    given ??
    "Run a JavaScript program that calls the tools below and get back what it prints and returns. Prefer one program that does all the steps over many tool calls: intermediate results stay in the program.";
  return [first, "", ...rules(timeoutMs), "", "```ts", types, "```"].join("\n");
}

/** What a program may do and how it reads, for the description. */
function rules(timeoutMs: number): string[] {
  return [
    "The program is the body of an async function (TypeScript types are allowed and stripped): use await and return at the top level.",
    "- tools.<name>(args) calls a tool with one object of arguments and resolves to its result; a failing tool rejects with an Error. Run independent calls together with Promise.all.",
    '- text(value) and console.log(...) print; image(img) shows an image ({ type: "image", data, mimeType } or a data: URL); the return value comes back last.',
    "- There is no fetch, require, import, process, file system or timers.",
    `- An optional first line lowers the deadline and caps the text that comes back: // @options: {"timeout_ms": 10000, "max_output_tokens": 2000} (a deadline of at most ${timeoutMs} ms).`,
    "- A failed run gives the error kind (script, timeout, aborted, sandbox), its message and stack (codemode.js:<line>).",
  ];
}

/** A call's answer, before its value is turned into JSON. */
type Answer = { ok: true; value: unknown } | { ok: false; message: string };

/** What a program of the code tool can call. */
interface Catalog {
  byName: Map<string, Callable>;
  declared: CodemodeDeclaredTool[];
  /** The global `describeTool(name)`, offered when the catalog is declared as an index. */
  describe: ((name: string) => string) | undefined;
}

/** The index's sentence on how to read a tool's full declaration, and the declaration of the global for it. */
const INDEX_HINT =
  'Before calling a tool, read its full declaration (parameters and result type): text(await describeTool("<name>")) prints it.';
const DESCRIBE_TOOL_DECLARATION =
  "/** The full TypeScript declaration of one tool of the index, by name; an unknown name rejects with close names. */\n" +
  "declare function describeTool(name: string): Promise<string>;";

async function run(
  sandbox: CodemodeSandboxBase,
  code: string,
  catalog: Catalog,
  maxTimeoutMs: number,
  context: ToolExecutionOptions,
): Promise<CodeToolResult> {
  let script: string;
  let timeoutMs = maxTimeoutMs;
  let maxOutputTokens: number | undefined;
  try {
    const parsed = parseCodemodeSource(code);
    script = await stripTypeScriptOnThread(parsed.code);
    timeoutMs = Math.min(parsed.options.timeoutMs ?? timeoutMs, timeoutMs);
    maxOutputTokens = parsed.options.maxOutputTokens;
  } catch (error) {
    if (!(error instanceof CodemodeSourceError)) throw error;
    const stack =
      error.line === undefined
        ? undefined
        : `    at codemode.js:${error.line}${error.column ? `:${error.column}` : ""}`;
    return {
      ok: false,
      output: [],
      error: { kind: "script", name: error.name, message: error.message, ...(stack ? { stack } : {}) },
    };
  }
  const controllers = new Set<AbortController>();
  let seq = 0;
  let calls = 0;
  const deliver = (id: number, outcome: Answer) => {
    if (running.finished) return;
    try {
      running.deliver(++seq, Date.now(), id, outcome.ok ? { ok: true, value: toJson(outcome.value) } : outcome);
    } catch (error) {
      running.deliver(seq, Date.now(), id, { ok: false, message: `the result is not JSON: ${errorMessage(error)}` });
    }
  };
  // A deterministic run takes its tools per run, so concurrent runs each answer their own calls with their own context.
  const handle = (call: CodemodeHostCall) => {
    if (call.target === "global") {
      // The only global is describeTool; answered at once (as a promise job, like any call).
      queueMicrotask(() => {
        try {
          if (catalog.describe === undefined || typeof call.args !== "string") {
            throw new TypeError("describeTool(name) takes the name of a tool as a string");
          }
          deliver(call.id, { ok: true, value: catalog.describe(call.args) });
        } catch (error) {
          deliver(call.id, { ok: false, message: errorMessage(error) });
        }
      });
      return;
    }
    const entry = catalog.byName.get(call.name);
    const controller = new AbortController();
    controllers.add(controller);
    const onAbort = () => controller.abort(context.abortSignal?.reason);
    context.abortSignal?.addEventListener("abort", onAbort, { once: true });
    const callId = `${context.toolCallId}/${++calls}`;
    const invoke = async () => {
      if (entry === undefined) throw new Error(`no tool named ${call.name}`);
      return callTool(entry, call.args, {
        ...context,
        toolCallId: callId,
        abortSignal: controller.signal,
      });
    };
    const settle = (outcome: Answer) => {
      context.abortSignal?.removeEventListener("abort", onAbort);
      controllers.delete(controller);
      deliver(call.id, outcome);
    };
    invoke().then(
      (value) => settle({ ok: true, value }),
      (error: unknown) => settle({ ok: false, message: errorMessage(error) }),
    );
  };
  const running = sandbox.start(script, {
    startedAt: Date.now(),
    seed: Math.floor(Math.random() * 0xffffffff),
    tools: catalog.declared,
    globals: catalog.describe === undefined ? [] : [{ name: "describeTool" }],
    timeoutMs,
    ...(context.abortSignal === undefined ? {} : { signal: context.abortSignal }),
    onCall: handle,
  });
  let result: CodemodeResult;
  try {
    result = await running.result;
  } finally {
    // Calls still running when the program ended are cancelled.
    for (const controller of controllers) controller.abort(new Error("the program ended before the call finished"));
  }
  const answer: CodeToolResult = result.ok
    ? { ok: true, output: result.output, ...(result.value === undefined ? {} : { value: result.value }) }
    : { ok: false, output: result.output, error: result.error };
  return maxOutputTokens === undefined ? answer : cutOutput(answer, maxOutputTokens);
}

/**
 * The program's text (output, then the value as the model reads it) cut to the first `maxTokens` tokens that its
 * `// @options: {"max_output_tokens": N}` line asked for, with a note; images are kept. The tokenizer is loaded only
 * when the text may be longer than that.
 */
async function cutOutput(answer: CodeToolResult, maxTokens: number): Promise<CodeToolResult> {
  const value = answer.ok && answer.value !== undefined ? valueText(answer.value) : undefined;
  const texts = answer.output.flatMap((item) => (item.type === "image" ? [] : [item.text]));
  if (value !== undefined) texts.push(value);
  const { cutToTokens, tokenUnit } = await import("../gateway/tokens.ts");
  const { texts: kept, cut } = await cutToTokens(texts, maxTokens);
  if (!cut) return answer;
  let i = 0;
  const output: CodemodeOutputItem[] = [];
  for (const item of answer.output) {
    if (item.type === "image") output.push(item);
    else {
      const text = kept[i++] as string;
      if (text !== "") output.push({ ...item, text });
    }
  }
  const total = texts.reduce((sum, text) => sum + text.length, 0);
  const keptValue = value === undefined ? undefined : (kept[i] as string);
  output.push({
    type: "text",
    text: `[Output cut: the text above is the first ${maxTokens} tokens (${await tokenUnit()}) of ${total} characters, as the // @options line asked.]`,
  });
  if (!answer.ok) return { ...answer, output };
  // A value cut short is the text the model would have read, up to the cut; one kept whole stays as it was.
  if (keptValue === undefined || keptValue === "") return { ok: true, output };
  return { ok: true, output, value: keptValue === value ? answer.value : keptValue };
}

/** A value as toModelOutput gives it to the model. */
function valueText(value: unknown): string {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

async function callTool(entry: Callable, args: unknown, options: ToolExecutionOptions): Promise<unknown> {
  let input = args ?? {};
  const schema = asSchema(entry.tool.inputSchema);
  if (schema.validate !== undefined) {
    const checked = await schema.validate(input);
    if (!checked.success)
      throw new TypeError(`invalid arguments for tools.${entry.id}: ${validationMessage(checked.error)}`);
    input = checked.value;
  }
  const execute = entry.tool.execute as (input: unknown, options: ToolExecutionOptions) => unknown;
  const output = execute(input, options);
  if (isAsyncIterable(output)) {
    // A streaming tool's last value is its result.
    let last: unknown;
    for await (const value of output) last = value;
    return last;
  }
  return await output;
}

/** A failed run's error as the model reads it: kind, name and message, then the stack lines. */
function errorHead(error: CodemodeError): string {
  const { kind, name, message, stack } = error;
  const head = name ? `${name}: ${message}` : message;
  const rest = stack?.startsWith(head) ? stack.slice(head.length).replace(/^\n/, "") : (stack ?? "");
  return `Error (${kind}): ${head}${rest.trim() === "" ? "" : `\n${rest.trimEnd()}`}`;
}

/** A failed run as the message of a CodeToolError: the error, then the text printed before it (images as a mark). */
function errorText(result: Extract<CodeToolResult, { ok: false }>): string {
  const head = errorHead(result.error);
  if (result.output.length === 0) return head;
  const printed = result.output.map((item) => (item.type === "image" ? `[image: ${item.mimeType}]` : item.text));
  return `${head}\nOutput before the error:\n${printed.join("\n")}`;
}

function isCodeToolResult(value: unknown): value is CodeToolResult {
  const { ok, output } = value as Partial<CodeToolResult>;
  return typeof ok === "boolean" && Array.isArray(output);
}

/**
 * The result as the model reads it. Images are `image-data` parts in AI SDK 6 and 7, `media` parts in AI SDK 5 (whose
 * tool result output has no `image-data`).
 */
function toModelOutput(output: CodeToolResult, imagePart: "image-data" | "media"): ToolResultOutput {
  const value: Extract<ToolResultOutput, { type: "content" }>["value"] = [];
  let lines: string[] = [];
  const flush = () => {
    if (lines.length > 0) value.push({ type: "text", text: lines.join("\n") });
    lines = [];
  };
  if (!output.ok) {
    value.push({ type: "text", text: errorHead(output.error) });
    if (output.output.length > 0) value.push({ type: "text", text: "Output before the error:" });
  }
  for (const item of output.output) {
    if (item.type === "image") {
      flush();
      value.push({ type: imagePart as "image-data", data: item.data, mediaType: item.mimeType });
    } else lines.push(item.text);
  }
  flush();
  if (output.ok && output.value !== undefined) {
    value.push({ type: "text", text: valueText(output.value) });
  }
  if (value.length === 0) value.push({ type: "text", text: "(The program printed nothing and returned undefined.)" });
  return { type: "content", value };
}

/** A schema's complaint in one line: `path: message` for each zod issue, otherwise the error's message. */
function validationMessage(error: Error): string {
  const issues = (error.cause as { issues?: unknown } | undefined)?.issues ?? (error as { issues?: unknown }).issues;
  if (!Array.isArray(issues) || issues.length === 0) return error.message;
  return issues
    .map((issue: { path?: PropertyKey[]; message?: string }) => {
      const path = (issue.path ?? []).map(String).join(".");
      return `${path === "" ? "(arguments)" : path}: ${issue.message ?? "invalid"}`;
    })
    .join("; ");
}

function toJson(value: unknown): unknown {
  if (value === undefined) return null;
  const text = JSON.stringify(value);
  return text === undefined ? null : JSON.parse(text);
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof value === "object" && value !== null && Symbol.asyncIterator in value;
}
