/**
 * OpenTelemetry traces of executions: a span per execution, and a child span per tool call the program makes (tool,
 * status and duration; arguments and results only when the host opts in with `setTraceOptions`). They go through
 * `@opentelemetry/api`, an optional peer dependency: without it nothing is loaded and nothing is traced; with it but no
 * tracer provider registered, the API's spans do not record and tool calls are not wrapped at all.
 *
 * The sandboxes, code mode and the gateway each call `startTrace` where an execution begins and wrap the tool calls
 * they make; the gateway takes the parent from a request's `_meta.traceparent` (`withTraceContext`), and upstream
 * requests carry the current context on (`traceMeta`).
 */

import { booleanOption, optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import { nodeRequire } from "../platform/platform.ts";

/** What a span attribute may hold (the API's `AttributeValue`). */
type AttributeValue =
  | string
  | number
  | boolean
  | (null | undefined | string)[]
  | (null | undefined | number)[]
  | (null | undefined | boolean)[];
/** The API's `Attributes`. */
type Attributes = Record<string, AttributeValue | undefined>;

/** The API's context: opaque here. */
type Context = object;
interface SpanContext {
  traceId: string;
  spanId: string;
  traceFlags: number;
  isRemote?: boolean;
}
interface Span {
  isRecording(): boolean;
  setAttribute(key: string, value: AttributeValue): unknown;
  setAttributes(attributes: Attributes): unknown;
  setStatus(status: { code: number; message?: string }): unknown;
  end(): void;
}
interface Tracer {
  startSpan(name: string, options: { kind: number; attributes: Attributes }, context: Context): Span;
}

/**
 * The part of `@opentelemetry/api` 1.x used here, written out so that these types (and the package's declarations)
 * do not need the API installed.
 */
interface Api {
  trace: {
    getTracer(name: string): Tracer;
    setSpan(context: Context, span: Span): Context;
    getSpanContext(context: Context): SpanContext | undefined;
    isSpanContextValid(spanContext: SpanContext): boolean;
    setSpanContext(context: Context, spanContext: SpanContext): Context;
  };
  context: { active(): Context; with<T>(context: Context, fn: () => T): T };
  propagation: {
    extract(context: Context, carrier: Record<string, string>): Context;
    inject(context: Context, carrier: Record<string, string>): void;
  };
  SpanKind: { INTERNAL: number; SERVER: number };
  SpanStatusCode: { ERROR: number };
}

/** Where API 1.x keeps what is registered with it (a tracer provider, a context manager, a propagator). */
const API_GLOBAL = Symbol.for("opentelemetry.js.api.1");

let api: Api | undefined;

/**
 * The API, loaded on first need and only once something in the process registered with it: before that, no span
 * could record and no context could be carried, and loading it would cost every start that does not trace.
 */
function otel(): Api | undefined {
  if (api !== undefined) return api;
  if ((globalThis as Record<symbol, unknown>)[API_GLOBAL] === undefined) return undefined;
  try {
    api = nodeRequire(import.meta.url)?.("@opentelemetry/api") as Api | undefined;
  } catch {
    // Registered by a copy this package cannot load: nothing is traced.
  }
  return api;
}

/** The instrumentation scope name of Airlock's spans. */
export const TRACER_NAME = "airlock-codemode";
/** Longest JSON of a tool's arguments or result recorded on a span (when the host opts in); longer ones are cut. */
export const MAX_TRACE_VALUE_CHARS = 8192;

export interface TraceOptions {
  /** Record each tool call's arguments as `gen_ai.tool.call.arguments` (JSON). Default false: they may hold user data. */
  toolArguments?: boolean;
  /** Record each tool call's result as `gen_ai.tool.call.result` (JSON), and a failed call's message. Default false. */
  toolResults?: boolean;
}

let traceOptions: Required<TraceOptions> = { toolArguments: false, toolResults: false };
const TRACE_OPTION_KEYS = optionKeys<TraceOptions>({ toolArguments: true, toolResults: true });

/** Sets what tool-call spans record besides the tool, status and duration, for every execution started afterwards. */
export function setTraceOptions(options: TraceOptions): void {
  if (options === null || typeof options !== "object") throw new TypeError("setTraceOptions takes an object");
  refuseUnknownOptions(options, "setTraceOptions", TRACE_OPTION_KEYS);
  for (const key of TRACE_OPTION_KEYS) booleanOption(options[key as keyof TraceOptions], key);
  traceOptions = { ...traceOptions, ...options };
}

/** True when `@opentelemetry/api` is installed and something in the process registered with it (a provider). */
export function tracingAvailable(): boolean {
  return otel() !== undefined;
}

/** How a finished execution or call is described on its span. */
export interface TraceEnd {
  ok: boolean;
  /** A short reason written by Airlock (an error kind or code), never program text or tool data. */
  error?: string;
  attributes?: Attributes;
}

/** One execution's span, and the child spans of its tool calls. */
export interface Trace {
  /** `tool` with an `execute` that runs each call as a child span (tools without a name are returned as they are). */
  tool<T extends { name: string; execute(args: unknown, context: never): unknown }>(tool: T): T;
  /** Runs one tool call as a child span; `failed` tells a resolved value that is a failure (a code-mode outcome). */
  call<T>(
    name: string,
    args: unknown,
    run: () => Promise<T> | T,
    failed?: (value: T) => string | undefined,
  ): Promise<T>;
  /** Runs `fn` with this span as the current one: spans started inside it (a sandbox's) are its children. */
  within<T>(fn: () => T): T;
  /** Ends the execution's span; calls still open end as cancelled. */
  end(end: TraceEnd): void;
}

/**
 * Starts an execution's span, as a child of the caller's current context, or returns undefined when nothing records
 * (no API, no provider, or not sampled): then the caller leaves its tools as they are.
 */
export function startTrace(
  name: string,
  attributes: Attributes = {},
  kind: "internal" | "server" = "internal",
): Trace | undefined {
  const api = otel();
  if (api === undefined) return undefined;
  const tracer = api.trace.getTracer(TRACER_NAME);
  const parent = api.context.active();
  const spanKind = kind === "server" ? api.SpanKind.SERVER : api.SpanKind.INTERNAL;
  const span = tracer.startSpan(name, { kind: spanKind, attributes }, parent);
  if (!span.isRecording()) {
    span.end();
    return undefined;
  }
  return new ExecutionTrace(api, tracer, span, api.trace.setSpan(parent, span));
}

class ExecutionTrace implements Trace {
  private readonly open = new Set<Span>();
  private ended = false;
  private readonly options = traceOptions;

  constructor(
    private readonly otel: Api,
    private readonly tracer: Tracer,
    private readonly span: Span,
    private readonly context: Context,
  ) {}

  tool<T extends { name: string; execute(args: unknown, context: never): unknown }>(tool: T): T {
    const call = (args: unknown, context: never) => this.call(tool.name, args, () => tool.execute(args, context));
    return { ...tool, execute: call };
  }

  call<T>(
    name: string,
    args: unknown,
    run: () => Promise<T> | T,
    failed?: (value: T) => string | undefined,
  ): Promise<T> {
    if (this.ended) return settle(run);
    const otel = this.otel;
    const attributes: Attributes = { "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name };
    if (this.options.toolArguments) attributes["gen_ai.tool.call.arguments"] = json(args);
    const span = this.tracer.startSpan(
      `execute_tool ${name}`,
      { kind: otel.SpanKind.INTERNAL, attributes },
      this.context,
    );
    this.open.add(span);
    const finish = (status: "ok" | "error", detail?: { result?: unknown; error?: string }) => {
      if (!this.open.delete(span)) return;
      span.setAttribute("airlock.tool.status", status);
      if (status === "error") {
        span.setStatus({ code: otel.SpanStatusCode.ERROR, message: "the tool call failed" });
        if (this.options.toolResults && detail?.error !== undefined) span.setAttribute("error.message", detail.error);
      } else if (this.options.toolResults) span.setAttribute("gen_ai.tool.call.result", json(detail?.result));
      span.end();
    };
    // The tool runs inside its span's context: its own instrumentation (and upstream requests) nest under it.
    let pending: Promise<T>;
    try {
      pending = Promise.resolve(otel.context.with(otel.trace.setSpan(this.context, span), run));
    } catch (error) {
      pending = Promise.reject(error);
    }
    return pending.then(
      (value) => {
        const failure = failed?.(value);
        if (failure === undefined) finish("ok", { result: value });
        else finish("error", { error: failure });
        return value;
      },
      (error: unknown) => {
        finish("error", { error: error instanceof Error ? error.message : String(error) });
        throw error;
      },
    );
  }

  within<T>(fn: () => T): T {
    return this.otel.context.with(this.context, fn);
  }

  end(end: TraceEnd): void {
    if (this.ended) return;
    this.ended = true;
    for (const span of this.open) {
      span.setAttribute("airlock.tool.status", "cancelled");
      span.end();
    }
    this.open.clear();
    if (end.attributes !== undefined) this.span.setAttributes(end.attributes);
    this.span.setAttribute("airlock.execution.ok", end.ok);
    if (!end.ok) {
      this.span.setStatus({ code: this.otel.SpanStatusCode.ERROR, message: end.error ?? "the execution failed" });
      if (end.error !== undefined) this.span.setAttribute("error.type", end.error);
    }
    this.span.end();
  }
}

/** Execution traces of code-mode runs, by the run object that owns them (see `traceRun` and `traceRunCall`). */
const runs = new WeakMap<object, Trace>();

/**
 * Traces a code-mode execution owned by `owner`: `run` is its whole run, and `traceRunCall(owner, …)` inside it adds
 * the broker calls. The outcome's `status` and `error.code` go on the span.
 */
export function traceRun<R extends { status: string; error?: { code?: string } }>(
  owner: object,
  name: string,
  attributes: Attributes,
  run: () => Promise<R>,
): Promise<R> {
  const trace = startTrace(name, attributes);
  if (trace === undefined) return run();
  runs.set(owner, trace);
  const ended = (outcome: R | undefined) => {
    runs.delete(owner);
    const ok = outcome?.status === "succeeded";
    const error = outcome === undefined ? "the executor failed" : outcome.error?.code;
    trace.end({
      ok,
      ...(ok || error === undefined ? {} : { error }),
      attributes: { "airlock.outcome": outcome?.status ?? "unknown" },
    });
  };
  return run().then(
    (outcome) => {
      ended(outcome);
      return outcome;
    },
    (error: unknown) => {
      ended(undefined);
      throw error;
    },
  );
}

/** One broker call of the code-mode run owned by `owner`, as a child span when that run is traced. */
export function traceRunCall<T>(owner: object, tool: string, input: unknown, call: () => Promise<T> | T): Promise<T> {
  const trace = runs.get(owner);
  if (trace === undefined) return settle(call);
  return trace.call(tool, input, call, (outcome) => {
    const status = (outcome as { status?: unknown } | null)?.status;
    if (status === "succeeded") return undefined;
    const code = (outcome as { error?: { code?: unknown } } | null)?.error?.code;
    return typeof code === "string" ? code : "failed";
  });
}

/** W3C trace context: version 00, a trace id, a parent span id and flags, in lower-case hex. */
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * Runs `fn` in the trace context carried by `meta` (`traceparent`, `tracestate`), as MCP requests carry it in
 * `_meta`; without one (or without the API) `fn` runs in the current context. The registered propagator reads it
 * first; W3C `traceparent` is read directly when no propagator is registered.
 */
export function withTraceContext<T>(meta: unknown, fn: () => T): T {
  const api = otel();
  if (api === undefined || meta === null || typeof meta !== "object") return fn();
  const carrier: Record<string, string> = {};
  for (const key of ["traceparent", "tracestate"]) {
    const value = (meta as Record<string, unknown>)[key];
    if (typeof value === "string" && value.length <= 512) carrier[key] = value;
  }
  if (carrier.traceparent === undefined) return fn();
  let context = api.propagation.extract(api.context.active(), carrier);
  if (api.trace.getSpanContext(context) === undefined) {
    const match = TRACEPARENT.exec(carrier.traceparent.trim());
    const [, traceId, spanId, flags] = match ?? [];
    if (traceId === undefined || spanId === undefined || flags === undefined) return fn();
    const spanContext = { traceId, spanId, traceFlags: Number.parseInt(flags, 16) & 1, isRemote: true };
    if (!api.trace.isSpanContextValid(spanContext)) return fn();
    context = api.trace.setSpanContext(context, spanContext);
  }
  return api.context.with(context, fn);
}

/** The current trace context as `_meta` fields (`traceparent`, `tracestate`) for a request to an upstream server. */
export function traceMeta(): Record<string, string> | undefined {
  const api = otel();
  if (api === undefined) return undefined;
  const active = api.context.active();
  const spanContext = api.trace.getSpanContext(active);
  if (spanContext === undefined || !api.trace.isSpanContextValid(spanContext)) return undefined;
  const carrier: Record<string, string> = {};
  api.propagation.inject(active, carrier);
  if (carrier.traceparent === undefined) {
    const flags = (spanContext.traceFlags & 1).toString(16).padStart(2, "0");
    carrier.traceparent = `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`;
  }
  return carrier;
}

/** `run()` as a promise, called now (a throw becomes a rejection). */
function settle<T>(run: () => Promise<T> | T): Promise<T> {
  try {
    return Promise.resolve(run());
  } catch (error) {
    return Promise.reject(error);
  }
}

/** A value as JSON for a span attribute, cut to `MAX_TRACE_VALUE_CHARS`. */
function json(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? "undefined";
  } catch {
    text = "(not JSON)";
  }
  return text.length > MAX_TRACE_VALUE_CHARS ? `${text.slice(0, MAX_TRACE_VALUE_CHARS)}…` : text;
}
