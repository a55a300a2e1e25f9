/**
 * OpenTelemetry traces through @opentelemetry/api, recorded with the OpenTelemetry SDK's in-memory exporter: a span per
 * execution and a child span per tool call in the sandboxes, in code mode and in the gateway (whose request's
 * _meta.traceparent is the parent, and whose upstream requests carry the trace on), arguments and results only once
 * the host opts in, and nothing loaded where the API is not installed.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { context, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import {
  Budget,
  CodemodeSandbox,
  defineTool,
  InlineCodemodeSandbox,
  invokeTool,
  setTraceOptions,
  TRACER_NAME,
  tracingAvailable,
  z,
} from "airlock-codemode";
import { createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { createCodeMode, defineCodeProgram } from "airlock-codemode/code-mode";
import { McpGateway } from "airlock-codemode/mcp";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { paged, REPO_ROOT } from "./fixtures/mcp/servers.ts";
import { testLimits } from "./helpers/code-mode.ts";

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager();

beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
  trace.setGlobalTracerProvider(provider);
});

afterAll(async () => {
  await provider.shutdown();
  trace.disable();
  context.disable();
});

afterEach(() => {
  exporter.reset();
  setTraceOptions({ toolArguments: false, toolResults: false });
});

const tracer = () => trace.getTracer("test");
const spans = () => exporter.getFinishedSpans();
const named = (name: string) => spans().filter((span) => span.name === name);
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;

const tools = [
  {
    name: "weather",
    execute: async ({ city }: { city: string }) => {
      // The tool's own span nests under its call's span.
      const inner = tracer().startSpan("weather backend");
      inner.end();
      return { city, tempC: city.length };
    },
  },
  {
    name: "broken",
    execute: async () => {
      throw new Error("secret-bearing failure");
    },
  },
];

const script = `
  const a = await tools.weather({ city: "Oslo" });
  const b = await tools.weather({ city: "Lisbon" });
  await tools.broken({}).catch(() => null);
  return a.tempC + b.tempC;`;

describe("the library sandboxes", () => {
  for (const [label, make] of [
    ["worker pool", () => new CodemodeSandbox({ poolSize: 1, tools: tools as never })],
    ["inline", () => new InlineCodemodeSandbox({ tools: tools as never })],
  ] as const) {
    it(`record an execution with its tool calls as children (${label})`, async () => {
      expect(tracingAvailable()).toBe(true);
      const sandbox = make();
      try {
        const result = await tracer().startActiveSpan("request", async (request) => {
          const done = await sandbox.execute(script);
          request.end();
          return done;
        });
        expect(result.ok && result.value).toBe(10);
        const [execution] = named("airlock.execute");
        const [request] = named("request");
        expect(execution?.instrumentationScope.name).toBe(TRACER_NAME);
        expect(parentOf(execution as ReadableSpan)).toBe(request?.spanContext().spanId);
        expect(execution?.attributes).toMatchObject({ "airlock.execution.ok": true, "airlock.tool_calls": 3 });
        const calls = spans().filter((span) => span.name.startsWith("execute_tool "));
        expect(calls.map((span) => [span.name, span.attributes["airlock.tool.status"]])).toEqual([
          ["execute_tool weather", "ok"],
          ["execute_tool weather", "ok"],
          ["execute_tool broken", "error"],
        ]);
        for (const call of calls) {
          expect(parentOf(call)).toBe(execution?.spanContext().spanId);
          expect(call.attributes["gen_ai.operation.name"]).toBe("execute_tool");
          // Arguments and results only when the host opts in.
          expect(call.attributes).not.toHaveProperty("gen_ai.tool.call.arguments");
          expect(call.attributes).not.toHaveProperty("gen_ai.tool.call.result");
        }
        const failed = calls[2] as ReadableSpan;
        expect(failed.status).toEqual({ code: SpanStatusCode.ERROR, message: "the tool call failed" });
        expect(JSON.stringify([failed.attributes, failed.status, failed.events])).not.toContain("secret-bearing");
        for (const inner of named("weather backend")) {
          expect(calls.slice(0, 2).map((call) => call.spanContext().spanId)).toContain(parentOf(inner));
        }
      } finally {
        await sandbox.close();
      }
    });
  }

  it("records arguments and results once the host opts in, and a failed execution's kind", async () => {
    setTraceOptions({ toolArguments: true, toolResults: true });
    expect(() => setTraceOptions({ toolArgs: true } as never)).toThrow(/setTraceOptions has no option "toolArgs"/);
    const sandbox = new InlineCodemodeSandbox({ tools: tools as never });
    try {
      await sandbox.execute(script);
      const [first, , broken] = spans().filter((span) => span.name.startsWith("execute_tool "));
      expect(first?.attributes["gen_ai.tool.call.arguments"]).toBe('{"city":"Oslo"}');
      expect(first?.attributes["gen_ai.tool.call.result"]).toBe('{"city":"Oslo","tempC":4}');
      expect(broken?.attributes["error.message"]).toBe("secret-bearing failure");
      exporter.reset();
      const timeout = await sandbox.execute("while (true) {}", { timeoutMs: 50 });
      expect(timeout.ok).toBe(false);
      const [execution] = named("airlock.execute");
      expect(execution?.status.code).toBe(SpanStatusCode.ERROR);
      expect(execution?.attributes).toMatchObject({ "airlock.execution.ok": false, "error.type": "timeout" });
    } finally {
      await sandbox.close();
    }
  });

  it("records nothing when no tracer provider is registered", async () => {
    trace.disable();
    const sandbox = new InlineCodemodeSandbox({ tools: tools as never });
    try {
      expect((await sandbox.execute(script)).ok).toBe(true);
      expect(spans()).toEqual([]);
    } finally {
      await sandbox.close();
      trace.setGlobalTracerProvider(provider);
    }
  });
});

describe("code mode", () => {
  it("records a program's execution and each broker call", async () => {
    const price = defineTool({
      id: "catalog.price",
      version: "1",
      description: "Price of one product in cents.",
      input: z.object({ sku: z.string() }),
      output: z.object({ cents: z.number().int() }),
      effects: "read",
      capabilities: [],
      costMicros: 0,
      execute: async ({ sku }) => ({ cents: sku.length * 100 }),
    });
    const program = defineCodeProgram({
      id: "catalog.total",
      version: "1",
      intent: "Add up prices.",
      language: "javascript",
      source: `async (input, tools) => {
        let total = 0;
        for (const sku of input.skus) total += (await tools.call('catalog.price', { sku })).output.cents;
        await tools.call('catalog.price', { sku: 7 });
        return { totalCents: total };
      }`,
      input: z.object({ skus: z.array(z.string()) }),
      output: z.object({ totalCents: z.number().int() }),
      inputSchemaId: "skus.v1",
      outputSchemaId: "total.v1",
      tools: [price],
      limits: testLimits({ maxToolCalls: 10 }),
    });
    const budget = new Budget(0, 10);
    const mode = createCodeMode({
      adapter: createQuickJsSandboxAdapter(),
      invokeTool: (tool, input, callContext) =>
        invokeTool(tool, input, {
          runId: callContext.runId,
          callId: callContext.callId,
          scope: callContext.scope,
          signal: callContext.signal,
          permissions: { allow: [`tool:${tool.id}`, "effect:read"] },
          budget,
        }),
    });
    try {
      const outcome = await mode.execute(
        program,
        { skus: ["ab", "cde"] },
        {
          runId: "run-1",
          executionId: "run-1:trace",
          scope: { principalId: "local", projectId: "demo" },
          signal: AbortSignal.timeout(20_000),
        },
      );
      expect(outcome.status).toBe("succeeded");
      const [execution] = named("airlock.code_mode.execute");
      expect(execution?.attributes).toMatchObject({
        "airlock.program.id": "catalog.total",
        "airlock.program.digest": program.digest,
        "airlock.outcome": "succeeded",
        "airlock.execution.ok": true,
      });
      const calls = named("execute_tool catalog.price");
      expect(calls.map((call) => call.attributes["airlock.tool.status"])).toEqual(["ok", "ok", "error"]);
      // A broker outcome that is a failure (an invalid input here) is an error, named by its public code only.
      expect(calls[2]?.status).toEqual({ code: SpanStatusCode.ERROR, message: "the tool call failed" });
      for (const call of calls) expect(parentOf(call)).toBe(execution?.spanContext().spanId);
    } finally {
      await mode.adapter.close();
    }
  });
});

describe("the gateway", () => {
  it("takes the request's traceparent as parent and carries the trace on to upstream servers", async () => {
    const gateway = await McpGateway.start(
      { mcpServers: { paged: paged("--tools", "1", "--echo-meta") } },
      { poolSize: 1 },
    );
    const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
    await gateway.createServer().connect(serverSide);
    const client = new Client({ name: "trace-test", version: "1.0.0" });
    await client.connect(clientSide);
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
    const parentId = "00f067aa0ba902b7";
    try {
      const run = await client.callTool({
        name: "execute",
        arguments: { code: "return await tools.paged__echo_meta({})" },
        _meta: { traceparent: `00-${traceId}-${parentId}-01` },
      });
      const request = named("tools/call execute")[0] as ReadableSpan;
      expect(request.kind).toBe(SpanKind.SERVER);
      expect(request.spanContext().traceId).toBe(traceId);
      expect(parentOf(request)).toBe(parentId);
      const execution = named("airlock.execute")[0] as ReadableSpan;
      expect(parentOf(execution)).toBe(request.spanContext().spanId);
      const call = named("execute_tool paged__echo_meta")[0] as ReadableSpan;
      expect(parentOf(call)).toBe(execution.spanContext().spanId);
      // The upstream server got the trace context of the tool call's span.
      const meta = JSON.parse((run as CallToolResult).content.map((b) => (b as { text: string }).text).join(""));
      expect(meta.traceparent).toBe(`00-${traceId}-${call.spanContext().spanId}-01`);

      // Without a traceparent, the gateway's span starts a trace of its own.
      exporter.reset();
      await client.callTool({ name: "execute", arguments: { code: "return 1" } });
      expect(named("tools/call execute")[0]?.spanContext().traceId).not.toBe(traceId);
    } finally {
      await client.close();
      await gateway.close();
    }
  });
});

describe("without @opentelemetry/api", () => {
  it("loads nothing of it, and executions run as before", async () => {
    const code = [
      'const airlock = await import("airlock-codemode");',
      "const sandbox = new airlock.InlineCodemodeSandbox({ tools: [{ name: 'add', execute: ({ a, b }) => a + b }] });",
      "const result = await sandbox.execute('return await tools.add({ a: 2, b: 3 })');",
      "await sandbox.close();",
      "console.log(JSON.stringify({ available: airlock.tracingAvailable(), value: result.value }));",
    ].join("\n");
    const output = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        ["--import", join(REPO_ROOT, "test", "fixtures", "hide-package.mjs"), "--input-type=module", "-e", code],
        { cwd: REPO_ROOT, env: { ...process.env, HIDE_PACKAGE: "@opentelemetry/api" }, timeout: 30_000 },
        (error, stdout, stderr) => (error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(stdout)),
      );
    });
    expect(JSON.parse(output.trim())).toEqual({ available: false, value: 5 });
  });
});
