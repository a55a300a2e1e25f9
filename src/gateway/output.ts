/** A run's result as the content of an MCP `tools/call` result. */
import type { CodemodeError, CodemodeOutputItem, CodemodeResult } from "../types.ts";
import { cutToTokens, tokenUnit } from "./tokens.ts";

export type McpTextBlock = { type: "text"; text: string };
export type McpImageBlock = { type: "image"; data: string; mimeType: string };
export type McpContentBlock = McpTextBlock | McpImageBlock;

export interface McpToolResult {
  [key: string]: unknown;
  content: McpContentBlock[];
  structuredContent?: ExecuteStructuredResult;
  isError?: boolean;
}

/** The `structuredContent` of an `execute` result; `EXECUTE_OUTPUT_SCHEMA` is its schema. */
export interface ExecuteStructuredResult {
  [key: string]: unknown;
  ok: boolean;
  /** The program's return value; absent when it returned nothing, failed, or its text was cut. */
  value?: unknown;
  /** What the program printed (text and console lines, joined by newlines), cut with the rest of the text. */
  output: string;
  /** How many images it showed (they are image blocks of the content). */
  images: number;
  /** True when text was cut to the token limit. */
  truncated: boolean;
  calls: { total: number; failed: number; cancelled: number; byTool: Record<string, number> };
  /** Why the run failed; `code` is Airlock's public code when the gateway stopped or refused it (waiting.ts). */
  error?: { kind: string; name?: string; message: string; code?: string };
  /** The run waits for a person's approval of one call (a client without elicitation, a gateway with a store). */
  waiting?: {
    /** The run's id: `execute` again with the same code and `resume: <run>` continues it. */
    run: string;
    /** The call's number in the run (`call:<n>` for `airlock approve`). */
    call: number;
    server?: string;
    tool: string;
    /** Its exact arguments (absent when they are not JSON within limits). */
    arguments?: unknown;
    /** Hex SHA-256 of the arguments' canonical JSON. */
    argumentsDigest: string;
    /** The digest `airlock approve` takes: it binds the code, the call's number, tool and arguments, and the expiry. */
    digest: string;
    /** When the request expires (ISO 8601). */
    expiresAt: string;
    /** The command line that approves the call, and the one that rejects it. */
    approve: string;
    reject: string;
  };
  /** The calls that needed a person's approval, in order, and what became of each (see upstream/approval.ts). */
  approvals?: { server: string; tool: string; decision: string }[];
  /** Calls that needed approval past the `MAX_APPROVAL_RECORDS` listed (all of them refused without asking). */
  approvalsNotListed?: number;
}

/** The `outputSchema` of `execute`. */
export const EXECUTE_OUTPUT_SCHEMA = {
  type: "object",
  properties: {
    ok: { type: "boolean", description: "Whether the program succeeded" },
    value: { description: "The program's return value (JSON); absent when it returned nothing, failed, or was cut" },
    output: { type: "string", description: "What the program printed, cut with the rest of the text" },
    images: { type: "integer", minimum: 0, description: "Images the program showed (image blocks of the content)" },
    truncated: { type: "boolean", description: "Text was cut to the token limit" },
    calls: {
      type: "object",
      description: "The tool calls the program made",
      properties: {
        total: { type: "integer", minimum: 0 },
        failed: { type: "integer", minimum: 0 },
        cancelled: { type: "integer", minimum: 0 },
        byTool: { type: "object", additionalProperties: { type: "integer", minimum: 0 } },
      },
      required: ["total", "failed", "cancelled", "byTool"],
    },
    error: {
      type: "object",
      description: "Why the run failed",
      properties: {
        kind: { type: "string", enum: ["script", "timeout", "aborted", "sandbox"] },
        name: { type: "string" },
        message: { type: "string" },
        code: { type: "string", description: "Airlock's public error code, when the gateway stopped the run" },
      },
      required: ["kind", "message"],
    },
    waiting: {
      type: "object",
      description:
        "The run waits for a person's approval of one call: approve or reject it as shown, then execute the same code with resume: run",
      properties: {
        run: { type: "string" },
        call: { type: "integer", minimum: 1 },
        server: { type: "string" },
        tool: { type: "string" },
        arguments: {},
        argumentsDigest: { type: "string" },
        digest: { type: "string" },
        expiresAt: { type: "string" },
        approve: { type: "string" },
        reject: { type: "string" },
      },
      required: ["run", "call", "tool", "argumentsDigest", "digest", "expiresAt", "approve", "reject"],
    },
    approvals: {
      type: "array",
      description: "The calls that needed a person's approval, and what became of each (only accepted ones were sent)",
      items: {
        type: "object",
        properties: {
          server: { type: "string" },
          tool: { type: "string" },
          decision: {
            type: "string",
            enum: ["accepted", "declined", "cancelled", "expired", "over_limit", "too_large", "unsupported", "failed"],
          },
        },
        required: ["server", "tool", "decision"],
      },
    },
    approvalsNotListed: {
      type: "integer",
      minimum: 1,
      description: "Calls that needed approval past the most listed in approvals (refused without asking)",
    },
  },
  required: ["ok", "output", "images", "truncated", "calls"],
} as const;

/** Names of failed tool calls listed under a run's error. */
export const MAX_FAILED_CALLS_SHOWN = 10;

/** Text of a run that printed nothing and returned nothing. */
export const EMPTY_RUN_TEXT = "(The script printed nothing and returned undefined.)";

export interface FormatOptions {
  /** Most tokens of text the result may carry (images are not counted). */
  maxOutputTokens: number;
  /** The largest `max_output_tokens` a script may ask for, for the note on a cut output. */
  maxOutputTokensLimit?: number;
}

/**
 * Content of a finished run. A successful run gives its output in order (consecutive text and console lines joined
 * into one text block, images as image blocks), then its value (a string as it is, anything else as JSON). A failed
 * run is `isError`, with the error first: `Error (<kind>): <name>: <message>` and the stack lines, then "Output before
 * the error:" and the output. All text together is cut to `maxOutputTokens` tokens, with a note saying so; the
 * `structuredContent` carries the same cut text (counted once), its printed part and the value if it was kept whole.
 */
export async function formatRunResult(result: CodemodeResult, options: FormatOptions): Promise<McpToolResult> {
  const blocks: McpContentBlock[] = [];
  if (!result.ok) {
    const failed = [...new Set(result.calls.filter((call) => call.status === "error").map((call) => call.name))];
    const calls =
      failed.length === 0
        ? ""
        : `\nTool calls that failed: ${failed
            .slice(0, MAX_FAILED_CALLS_SHOWN)
            .map((name) => `tools.${name}`)
            .join(", ")}${failed.length > MAX_FAILED_CALLS_SHOWN ? ", ..." : ""}`;
    blocks.push({ type: "text", text: formatRunError(result.error) + calls });
    if (result.output.length > 0) blocks.push({ type: "text", text: "Output before the error:" });
  }
  const printedFrom = blocks.length;
  blocks.push(...outputBlocks(result.output));
  const printedTo = blocks.length;
  const valueText = result.ok ? formatValue(result.value) : undefined;
  if (valueText !== undefined) blocks.push({ type: "text", text: valueText });
  if (result.ok && blocks.length === 0) blocks.push({ type: "text", text: EMPTY_RUN_TEXT });
  const { content, kept, cut } = await cutTextBlocks(blocks, options);
  // The printed text as the program's lines joined, up to where it was cut.
  const printed: string[] = [];
  for (let i = printedFrom; i < printedTo; i++) {
    const block = blocks[i] as McpContentBlock;
    if (block.type === "image") continue;
    const text = kept.get(block) as string;
    if (text === block.text) printed.push(text);
    else {
      if (text !== "") printed.push(text);
      break;
    }
  }
  const valueKept = valueText !== undefined && kept.get(blocks[printedTo] as McpContentBlock) === valueText;
  const structuredContent = structured(result, printed.join("\n"), valueKept, cut);
  return result.ok ? { content, structuredContent } : { content, structuredContent, isError: true };
}

/** The run as `structuredContent`, given its printed text as it was cut and whether its value was kept. */
function structured(
  result: CodemodeResult,
  output: string,
  valueKept: boolean,
  truncated: boolean,
): ExecuteStructuredResult {
  const byTool: Record<string, number> = {};
  for (const call of result.calls) {
    Object.defineProperty(byTool, call.name, {
      value: (Object.hasOwn(byTool, call.name) ? (byTool[call.name] as number) : 0) + 1,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  const out: ExecuteStructuredResult = {
    ok: result.ok,
    output,
    images: result.output.filter((item) => item.type === "image").length,
    truncated,
    calls: {
      total: result.calls.length,
      failed: result.calls.filter((call) => call.status === "error").length,
      cancelled: result.calls.filter((call) => call.status === "cancelled").length,
      byTool,
    },
  };
  if (result.ok && result.value !== undefined && valueKept) out.value = result.value;
  if (!result.ok) {
    const { kind, name, message } = result.error;
    out.error = { kind, ...(name === undefined ? {} : { name }), message };
  }
  return out;
}

/** An error for the model: kind, name and message on the first line, then the script's stack frames. */
export function formatRunError(error: CodemodeError): string {
  const head = error.name ? `${error.name}: ${error.message}` : error.message;
  let text = `Error (${error.kind}): ${head}`;
  if (error.stack) {
    const stack = error.stack.startsWith(head) ? error.stack.slice(head.length).replace(/^\n/, "") : error.stack;
    const lines = stack.split("\n").filter((line) => line.trim() !== "");
    if (lines.length > 0) text += `\n${lines.join("\n")}`;
  }
  return text;
}

function outputBlocks(items: readonly CodemodeOutputItem[]): McpContentBlock[] {
  const blocks: McpContentBlock[] = [];
  let lines: string[] = [];
  const flush = () => {
    if (lines.length > 0) blocks.push({ type: "text", text: lines.join("\n") });
    lines = [];
  };
  for (const item of items) {
    if (item.type === "image") {
      flush();
      blocks.push({ type: "image", data: item.data, mimeType: item.mimeType });
    } else lines.push(item.text);
  }
  flush();
  return blocks;
}

function formatValue(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value === "string") return value;
  return JSON.stringify(value, null, 2);
}

/**
 * The blocks with all their text together cut to `maxOutputTokens` tokens, and a note saying so when anything was
 * cut; images are kept. `airlock run` cuts its printed output with it too.
 */
export async function cutBlocks(blocks: McpContentBlock[], options: FormatOptions): Promise<McpContentBlock[]> {
  return (await cutTextBlocks(blocks, options)).content;
}

/** `cutBlocks`, with the text each text block kept (by block) and whether anything was cut. */
async function cutTextBlocks(
  blocks: McpContentBlock[],
  options: FormatOptions,
): Promise<{ content: McpContentBlock[]; kept: Map<McpContentBlock, string>; cut: boolean }> {
  const textBlocks = blocks.filter((block): block is McpTextBlock => block.type === "text");
  const texts = textBlocks.map((block) => block.text);
  const { texts: keptTexts, cut } = await cutToTokens(texts, options.maxOutputTokens);
  const kept = new Map<McpContentBlock, string>(textBlocks.map((block, i) => [block, keptTexts[i] as string]));
  if (!cut) return { content: blocks, kept, cut };
  const total = texts.reduce((sum, text) => sum + text.length, 0);
  const content: McpContentBlock[] = [];
  for (const block of blocks) {
    if (block.type === "image") content.push(block);
    else {
      const text = kept.get(block) as string;
      if (text !== "") content.push({ type: "text", text });
    }
  }
  const limit = options.maxOutputTokensLimit ?? options.maxOutputTokens;
  const raise =
    limit > options.maxOutputTokens
      ? ` To see more, return less or set a higher limit on the script's first line, for example // @options: {"max_output_tokens": ${limit}} (at most ${limit}).`
      : " To see more, return or print less: for example filter, summarize or page through the data in the script.";
  content.push({
    type: "text",
    text: `[Output cut: the text above is the first ${options.maxOutputTokens} tokens (${await tokenUnit()}) of ${total} characters.${raise}]`,
  });
  return { content, kept, cut };
}
