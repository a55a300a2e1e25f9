/** What a script gets from an upstream `tools/call` result. */

/** The parts of an MCP `CallToolResult` this module reads. */
export interface McpCallResult {
  content?: unknown;
  structuredContent?: unknown;
  isError?: unknown;
  /** Results of servers speaking the 2024-10-07 protocol. */
  toolResult?: unknown;
}

/** An image content block as `image()` in a script accepts it. */
export interface McpImageValue {
  type: "image";
  data: string;
  mimeType: string;
}

/**
 * The value a call resolves to in the script:
 * - `structuredContent` when the server sent it;
 * - otherwise the content: one text block becomes its text, parsed as JSON when it is JSON; one image block becomes
 *   `{ type: "image", data, mimeType }` (what `image()` accepts); several blocks become an array of those values;
 *   audio, resource links and embedded resources stay the MCP blocks they are; no content at all is `null`.
 */
export function callResultToValue(result: McpCallResult): unknown {
  if (result.structuredContent !== undefined && result.structuredContent !== null) return result.structuredContent;
  if (!Array.isArray(result.content)) return result.toolResult ?? null;
  const values = result.content.map(blockToValue);
  if (values.length === 0) return null;
  return values.length === 1 ? values[0] : values;
}

/** The message of an `isError` result: its text blocks joined, or a generic sentence when it has none. */
export function callResultErrorMessage(result: McpCallResult, tool: string): string {
  const texts = Array.isArray(result.content)
    ? result.content
        .filter((block): block is { type: "text"; text: string } => isTextBlock(block))
        .map((block) => block.text.trim())
        .filter((text) => text !== "")
    : [];
  if (texts.length > 0) return texts.join("\n");
  if (result.structuredContent !== undefined) return JSON.stringify(result.structuredContent);
  return `the tool ${tool} reported an error without a message`;
}

function blockToValue(block: unknown): unknown {
  if (isTextBlock(block)) return parseJsonText(block.text);
  if (isRecord(block) && block.type === "image" && typeof block.data === "string") {
    return { type: "image", data: block.data, mimeType: typeof block.mimeType === "string" ? block.mimeType : "" };
  }
  return block;
}

/** The text as JSON when all of it is one JSON value, otherwise the text. */
export function parseJsonText(text: string): unknown {
  const trimmed = text.trim();
  if (trimmed === "") return text;
  const first = trimmed[0] as string;
  // Only texts that look like JSON are parsed: a bare word ("true", "null") or number stays text unless it is all.
  if (!(first === "{" || first === "[" || first === '"' || first === "-" || (first >= "0" && first <= "9"))) {
    if (trimmed !== "true" && trimmed !== "false" && trimmed !== "null") return text;
  }
  try {
    return JSON.parse(trimmed);
  } catch {
    return text;
  }
}

function isTextBlock(block: unknown): block is { type: "text"; text: string } {
  return isRecord(block) && block.type === "text" && typeof block.text === "string";
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
