/**
 * `airlock-codemode/ai`: `createCodeTool` turns AI SDK tools into one code tool, driven here by the AI SDK's own mock
 * language model through a real `generateText` tool loop. The file runs on every AI SDK major the package accepts
 * (5, 6 and 7: vitest.config.ts resolves `ai` to each), as a user of each writes it.
 */

import { generateText, jsonSchema, stepCountIs, tool } from "ai";
import * as aiTest from "ai/test";
import { InlineCodemodeSandbox } from "airlock-codemode";
import { CodeToolError, createCodeTool } from "airlock-codemode/ai";
import { afterAll, describe, expect, it } from "vitest";
import { z } from "zod";

type MockLanguageModelV3 = aiTest.MockLanguageModelV3;
type GenerateResult = Awaited<ReturnType<MockLanguageModelV3["doGenerate"]>>;
type CallOptions = Parameters<MockLanguageModelV3["doGenerate"]>[0];

/**
 * Each AI SDK's own model interface, as its providers have it: version 2 in AI SDK 5 (a finish reason and usage of
 * its own shape, tool output given to `toModelOutput` as it is), 3 in 6, 4 in 7.
 */
const mocks = aiTest as unknown as Record<string, typeof aiTest.MockLanguageModelV3 | undefined>;
const MockModel = (mocks.MockLanguageModelV4 ?? mocks.MockLanguageModelV3 ?? mocks.MockLanguageModelV2) as NonNullable<
  (typeof mocks)[string]
>;
const sdk = mocks.MockLanguageModelV4 ? 7 : mocks.MockLanguageModelV3 ? 6 : 5;
const sdk5 = sdk === 5;

const usage = (
  sdk5
    ? { inputTokens: 10, outputTokens: 5, totalTokens: 15 }
    : {
        inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
        outputTokens: { total: 5, text: 5, reasoning: 0 },
      }
) as GenerateResult["usage"];

function finished(reason: "tool-calls" | "stop"): GenerateResult["finishReason"] {
  if (sdk5) return reason as never;
  return { unified: reason, raw: reason === "stop" ? "stop" : "tool_calls" };
}

function toolCall(id: string, code: string): GenerateResult {
  return {
    content: [{ type: "tool-call", toolCallId: id, toolName: "code", input: JSON.stringify({ code }) }],
    finishReason: finished("tool-calls"),
    usage,
    warnings: [],
  };
}

function answer(text: string): GenerateResult {
  return { content: [{ type: "text", text }], finishReason: finished("stop"), usage, warnings: [] };
}

/** What the model was sent as the result of tool call `id`. */
function toolResultIn(call: CallOptions, id: string): unknown {
  for (const message of call.prompt) {
    if (message.role !== "tool") continue;
    for (const part of message.content) if (part.type === "tool-result" && part.toolCallId === id) return part.output;
  }
  return undefined;
}

const seen: { city: string; toolCallId: string; aborted: boolean }[] = [];

const tools = {
  weather: tool({
    description: "Current weather of a city.",
    inputSchema: z.object({ city: z.string().describe("City name"), unit: z.enum(["C", "F"]).default("C") }),
    outputSchema: z.object({ city: z.string(), temp: z.number(), unit: z.string() }),
    execute: async ({ city, unit }, { toolCallId, abortSignal }) => {
      seen.push({ city, toolCallId, aborted: abortSignal?.aborted ?? false });
      const tempC = city.length * 3;
      return { city, temp: unit === "F" ? tempC * 1.8 + 32 : tempC, unit };
    },
  }),
  "add-numbers": tool({
    description: "Adds two numbers.",
    inputSchema: jsonSchema<{ a: number; b: number }>({
      type: "object",
      properties: { a: { type: "number" }, b: { type: "number" } },
      required: ["a", "b"],
    }),
    execute: async ({ a, b }) => a + b,
  }),
  countdown: tool({
    description: "Streams a countdown; its result is the last value.",
    inputSchema: z.object({ from: z.number().int() }),
    async *execute({ from }) {
      for (let i = from; i >= 0; i--) yield i;
    },
  }),
  ask: tool({ description: "Asks the user; runs on the client.", inputSchema: z.object({ question: z.string() }) }),
};

const code = createCodeTool({ tools });

afterAll(async () => {
  await code.close();
});

describe("createCodeTool", () => {
  it("refuses bad options with errors that name them", () => {
    expect(() => createCodeTool(null as never)).toThrow("createCodeTool({ tools }) needs an object of AI SDK tools");
    expect(() => createCodeTool({ tools: {}, timeout: 5 } as never)).toThrow(
      'createCodeTool has no option "timeout" (it takes tools, sandbox, timeoutMs, description, failedRuns)',
    );
    expect(() => createCodeTool({ tools: {}, failedRuns: "throw" as never })).toThrow(
      'failedRuns must be "tool-error" or "result", got "throw"',
    );
    expect(() => createCodeTool({ tools: {}, timeoutMs: 0 })).toThrow("timeoutMs must be a positive finite number");
    // The model would be told "at most Infinity ms", and a program could run forever.
    expect(() => createCodeTool({ tools: {}, timeoutMs: Number.POSITIVE_INFINITY })).toThrow(
      "timeoutMs must be a positive finite number of ms, got Infinity",
    );
  });

  it("declares the callable tools in its description", () => {
    expect(code.description).toContain("The program is the body of an async function");
    expect(code.description).toContain(code.declarations);
    expect(code.declarations).toContain(
      "  /** Current weather of a city. */\n  weather(args: {\n    // City name\n    city: string;",
    );
    expect(code.declarations).toContain('    unit?: "C" | "F";');
    expect(code.declarations).toContain(
      "}): Promise<{\n    city: string;\n    temp: number;\n    unit: string;\n  }>;",
    );
    expect(code.declarations).toContain(
      "  add_numbers(args: {\n    a: number;\n    b: number;\n  }): Promise<unknown>;",
    );
    expect(code.declarations).toContain("  countdown(args: {");
    // A tool a program cannot run: one without execute (it runs on the client).
    expect(code.declarations).not.toContain("ask(");
  });

  it("refuses a tool that needs approval, instead of dropping it without a word", () => {
    const wipe = tool({
      description: "Deletes everything. Needs approval.",
      inputSchema: z.object({}),
      needsApproval: true,
      execute: async () => "wiped",
    });
    const ask = tool({ inputSchema: z.object({}), needsApproval: async () => true, execute: async () => "asked" });
    for (const [name, needing] of [
      ["wipe", wipe],
      ["ask", ask],
    ] as const) {
      expect(() => createCodeTool({ tools: { ...tools, [name]: needing } })).toThrow(
        `tool "${name}" has needsApproval, which a program cannot stop for: leave it out of createCodeTool's tools and offer it to the model directly`,
      );
    }
    const notNeeding = tool({ inputSchema: z.object({}), needsApproval: false, execute: async () => "ok" });
    expect(createCodeTool({ tools: { fine: notNeeding } }).declarations).toContain("fine(");
  });

  it("places the declarations and rules where a description template asks for them", () => {
    const templated = createCodeTool({
      tools,
      description: "Write a program.\n\nTools:\n{{types}}\n\nRules:\n{{rules}}\nEnd.",
    });
    expect(templated.description).toBe(
      `Write a program.\n\nTools:\n${templated.declarations}\n\nRules:\n${code.description?.split("\n\n")[1]}\nEnd.`,
    );
    expect(templated.description).not.toContain("{{");
    // Without the placeholder, a description replaces the first paragraph only.
    const plain = createCodeTool({ tools, description: "Look things up." });
    expect(plain.description?.startsWith("Look things up.\n\nThe program is the body")).toBe(true);
    expect(plain.description).toContain(plain.declarations);
  });

  it("declares a large catalog as an index, and gives programs describeTool() for the full declarations", async () => {
    const many = Object.fromEntries(
      Array.from({ length: 45 }, (_, i) => [
        `lookup_${i}`,
        tool({
          description: `Looks up record ${i}. Returns its fields.`,
          inputSchema: z.object({ id: z.string().describe("Record id") }),
          execute: async ({ id }) => ({ record: i, id }),
        }),
      ]),
    );
    const sandbox = new InlineCodemodeSandbox();
    const indexed = createCodeTool({ tools: many, sandbox });
    expect(indexed.declarations).toContain("Index of 45 tools");
    expect(indexed.declarations).toContain('text(await describeTool("<name>"))');
    expect(indexed.declarations).toContain("declare function describeTool(name: string): Promise<string>;");
    expect(indexed.declarations).not.toContain("Record id");
    const execute = indexed.execute as (input: { code: string }, options: object) => Promise<unknown>;
    const run = (program: string) => execute({ code: program }, { toolCallId: "c", messages: [] });
    expect(
      await run('text(await describeTool("lookup_7")); return (await tools.lookup_7({ id: "a" })).record'),
    ).toEqual({
      ok: true,
      output: [
        {
          type: "text",
          text: "declare const tools: {\n  /** Looks up record 7. Returns its fields. */\n  lookup_7(args: {\n    // Record id\n    id: string;\n  }): Promise<unknown>;\n};",
        },
      ],
      value: 7,
    });
    const unknown = (await run('try { await describeTool("lookup_77") } catch (e) { return e.message }')) as {
      value: string;
    };
    expect(unknown.value).toMatch(/^Unknown tool "lookup_77"\. Did you mean "lookup_7/);
    // A small catalog is declared in full: no describeTool.
    expect(code.declarations).not.toContain("describeTool");
    const small = (await (code.execute as typeof execute)(
      { code: "return typeof describeTool" },
      {
        toolCallId: "d",
        messages: [],
      },
    )) as { value: string };
    expect(small.value).toBe("undefined");
    await sandbox.close();
  });

  it("runs the model's program in a generateText tool loop", async () => {
    seen.length = 0;
    const model = new MockModel({
      doGenerate: async (options) => {
        const step = model.doGenerateCalls.length;
        if (step === 1) {
          return toolCall(
            "call-1",
            [
              "const cities: string[] = ['Oslo', 'Lisbon', 'Nairobi'];",
              "const reports = await Promise.all(cities.map((city) => tools.weather({ city })));",
              "const total = await tools.add_numbers({ a: reports[0].temp, b: reports[1].temp });",
              'console.log("checked", reports.length, "cities");',
              "return { warmest: reports.sort((x, y) => y.temp - x.temp)[0].city, total, countdown: await tools.countdown({ from: 3 }) };",
            ].join("\n"),
          );
        }
        const output = toolResultIn(options, "call-1") as { type: string; value: { type: string; text: string }[] };
        return answer(`done: ${output.value.map((part) => part.text).join(" | ")}`);
      },
    });
    const result = await generateText({
      model,
      tools: { code },
      stopWhen: stepCountIs(4),
      prompt: "Which of Oslo, Lisbon and Nairobi is warmest?",
    });

    expect(model.doGenerateCalls).toHaveLength(2);
    const offered = model.doGenerateCalls[0]?.tools ?? [];
    expect(offered.map((t) => t.name)).toEqual(["code"]);
    expect(offered[0]).toMatchObject({ type: "function", description: code.description });
    expect(result.steps).toHaveLength(2);
    const toolResult = result.steps[0]?.toolResults[0];
    expect(toolResult?.output).toEqual({
      ok: true,
      output: [{ type: "text", text: "checked 3 cities", console: true }],
      value: { warmest: "Nairobi", total: 30, countdown: 0 },
    });
    expect(result.text).toBe(
      'done: checked 3 cities | {\n  "warmest": "Nairobi",\n  "total": 30,\n  "countdown": 0\n}',
    );
    // Each inner call got its own id under the code tool's call and a live signal; zod defaults were applied.
    expect(seen.map((s) => s.city).sort()).toEqual(["Lisbon", "Nairobi", "Oslo"]);
    expect(seen.map((s) => s.toolCallId).sort()).toEqual(["call-1/1", "call-1/2", "call-1/3"]);
    expect(seen.every((s) => !s.aborted)).toBe(true);
  });

  it("reports a failed program as a tool error, which the model reads and fixes in the next step", async () => {
    const model = new MockModel({
      doGenerate: async (options) => {
        const step = model.doGenerateCalls.length;
        if (step === 1) return toolCall("bad", 'text("looking");\nawait tools.weather({ town: "Oslo" });');
        if (step === 2) {
          // The AI SDK's own convention for a tool that threw: an error-text result carrying the message (after the
          // error's name in AI SDK 7).
          expect(toolResultIn(options, "bad")).toEqual({
            type: "error-text",
            value:
              `${sdk === 7 ? "CodeToolError: " : ""}Error (script): Error: invalid arguments for tools.weather: city: Invalid input: expected string, received undefined\n` +
              "Output before the error:\nlooking",
          });
          return toolCall("good", "return (await tools.weather({ city: 'Oslo', unit: 'F' })).temp;");
        }
        return answer("ok");
      },
    });
    const result = await generateText({ model, tools: { code }, stopWhen: stepCountIs(5), prompt: "weather" });
    expect(result.steps).toHaveLength(3);
    const failed = result.steps[0]?.content.find((part) => part.type === "tool-error");
    expect(failed).toMatchObject({ type: "tool-error", toolName: "code", toolCallId: "bad" });
    const error = (failed as { error: unknown }).error;
    expect(error).toBeInstanceOf(CodeToolError);
    expect((error as CodeToolError).result).toMatchObject({
      ok: false,
      output: [{ type: "text", text: "looking" }],
      error: { kind: "script", message: expect.stringMatching(/invalid arguments for tools\.weather/) },
    });
    expect(result.steps[0]?.toolResults).toEqual([]);
    expect(result.steps[1]?.toolResults[0]?.output).toEqual({ ok: true, output: [], value: 53.6 });
  });

  it("returns a failed program as an ordinary result with failedRuns: result", async () => {
    const keeping = createCodeTool({ tools, failedRuns: "result", sandbox: new InlineCodemodeSandbox() });
    const output = await keeping.execute?.(
      { code: 'text("before");\nconst r = {};\nr.items.push(1);' },
      { toolCallId: "k", messages: [] },
    );
    expect(output).toEqual({
      ok: false,
      output: [{ type: "text", text: "before" }],
      error: {
        kind: "script",
        name: "TypeError",
        message: "cannot read property 'push' of undefined (line 3: r.items.push(1);)",
        stack:
          "TypeError: cannot read property 'push' of undefined (line 3: r.items.push(1);)\n    at <anonymous> (codemode.js:3:1)",
      },
    });
    // As the AI SDK calls it: with the output itself (5), or with the call around it (6, 7).
    const toModelOutput = keeping.toModelOutput as (given: unknown) => unknown;
    const given = sdk5 ? output : { toolCallId: "k", input: { code: "" }, output };
    expect(toModelOutput(given)).toEqual({
      type: "content",
      value: [
        {
          type: "text",
          text: "Error (script): TypeError: cannot read property 'push' of undefined (line 3: r.items.push(1);)\n    at <anonymous> (codemode.js:3:1)",
        },
        { type: "text", text: "Output before the error:" },
        { type: "text", text: "before" },
      ],
    });
  });

  it("cuts the text that comes back to the max_output_tokens of the program's options line, keeping images", async () => {
    const program = [
      '// @options: {"max_output_tokens": 20}',
      'text("first line");',
      'image({ type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" });',
      'for (let i = 0; i < 200; i++) text("word ".repeat(10));',
      "return { big: 'x'.repeat(1000) };",
    ].join("\n");
    const output = (await code.execute?.({ code: program }, { toolCallId: "cut", messages: [] })) as {
      ok: boolean;
      output: { type: string; text?: string }[];
      value?: unknown;
    };
    // Before, the options line's max_output_tokens was accepted and ignored: all 10,000 characters came back.
    expect(output.ok).toBe(true);
    expect(output.output[0]).toEqual({ type: "text", text: "first line" });
    expect(output.output.some((item) => item.type === "image")).toBe(true);
    expect(output.output.at(-1)?.text).toMatch(
      /^\[Output cut: the text above is the first 20 tokens \(.+\) of \d+ characters/,
    );
    const kept = output.output.flatMap((item) => (item.type === "text" ? [item.text ?? ""] : [])).slice(0, -1);
    expect(kept.join("").length).toBeLessThan(200);
    expect(output.value).toBeUndefined();
    const small = await code.execute?.(
      { code: '// @options: {"max_output_tokens": 2000}\ntext("hi"); return { a: 1 };' },
      { toolCallId: "small", messages: [] },
    );
    expect(small).toEqual({ ok: true, output: [{ type: "text", text: "hi" }], value: { a: 1 } });
  });

  it("sends images as image content and honours the abort signal", async () => {
    const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    const model = new MockModel({
      doGenerate: async (options) => {
        if (model.doGenerateCalls.length === 1) {
          return toolCall("img", `image({ type: "image", data: "${png}", mimeType: "image/png" });\ntext("a dot");`);
        }
        const output = toolResultIn(options, "img") as { type: string; value: unknown[] };
        expect(output.type).toBe("content");
        expect(output.value).toHaveLength(2);
        // The image as each AI SDK gives it to its models: a media part (5), image data (6), a file (7).
        const image = {
          5: { type: "media", data: png, mediaType: "image/png" },
          6: { type: "image-data", data: png, mediaType: "image/png" },
          7: { type: "file", mediaType: "image/png", data: { type: "data", data: png } },
        }[sdk];
        expect(output.value[0]).toMatchObject(image);
        expect(output.value[1]).toEqual({ type: "text", text: "a dot" });
        return answer("saw it");
      },
    });
    const result = await generateText({ model, tools: { code }, stopWhen: stepCountIs(3), prompt: "draw" });
    expect(result.text).toBe("saw it");

    const slow = createCodeTool({
      tools: {
        sleep: tool({
          inputSchema: z.object({}),
          execute: (_input, { abortSignal }) =>
            new Promise((resolve) => abortSignal?.addEventListener("abort", () => resolve("woke"))),
        }),
      },
      sandbox: new InlineCodemodeSandbox(),
    });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const aborted = slow.execute?.(
      { code: "await tools.sleep({});" },
      { toolCallId: "s", messages: [], abortSignal: controller.signal },
    );
    await expect(aborted).rejects.toThrow(CodeToolError);
    await expect(aborted).rejects.toMatchObject({ result: { ok: false, error: { kind: "aborted" } } });
  });
});
