import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  DEFAULT_INDEX_HINT,
  describeTool,
  INDEX_THRESHOLD_TOOLS,
  renderDeclarations,
  renderToolIndex,
  renderToolSignature,
  searchTools,
  type ToolLike,
} from "airlock-codemode/declarations";
import { describe, expect, test } from "vitest";
import { tokenize } from "../dist/declarations/search.js";

const fixtures = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "schemas");
const load = (server: string): ToolLike[] =>
  (JSON.parse(readFileSync(join(fixtures, `mcp-server-${server}.json`), "utf8")) as { tools: ToolLike[] }).tools;

/** The real tool lists of four MCP servers: 65 tools. */
const catalog = ["everything", "filesystem", "memory", "github"].flatMap(load);

const names = (query: string, limit = 3) => searchTools(catalog, query, { limit }).map((result) => result.name);

/** `count` small tools named tool_0, tool_1, … */
function syntheticCatalog(count: number): ToolLike[] {
  return Array.from({ length: count }, (_, i) => ({
    name: `tool_${i}`,
    description: `Tool number ${i}. It does thing ${i}.\nMore detail.`,
    inputSchema: { type: "object", properties: { n: { type: "number" } } },
  }));
}

describe("tokenize", () => {
  test("splits snake_case, camelCase, kebab-case and acronyms, drops stop words, stems plurals", () => {
    expect(tokenize("list_directory_with_sizes")).toEqual(["list", "directory", "size"]);
    expect(tokenize("getFileInfo")).toEqual(["get", "file", "info"]);
    expect(tokenize("get-resource-links")).toEqual(["get", "resourc", "link"]);
    expect(tokenize("parseHTTPResponse")).toEqual(["pars", "http", "respons"]);
    expect(tokenize("Reads the files")).toEqual(tokenize("read file"));
  });
});

describe("searchTools", () => {
  test("ranks tools whose name matches the query first", () => {
    expect(names("read file")[0]).toBe("read_file");
    expect(names("create issue")[0]).toBe("create_issue");
    expect(names("move file")[0]).toBe("move_file");
    expect(names("search code")[0]).toBe("search_code");
    expect(names("getFileInfo")[0]).toBe("get_file_info");
    expect(names("fork")).toEqual(["fork_repository"]);
  });

  test("matches descriptions and parameter names", () => {
    expect(names("sum two numbers")[0]).toBe("get-sum");
    expect(names("environment variables")[0]).toBe("get-env");
    expect(names("compress gzip")[0]).toBe("gzip-file-as-resource");
    // `observations` is a parameter of add_observations and a property of create_entities' items.
    expect(names("observations", 5)).toEqual(expect.arrayContaining(["add_observations", "delete_observations"]));
    expect(names("pull_number", 10).every((name) => name.includes("pull_request"))).toBe(true);
  });

  test("a name match outweighs a description match", () => {
    const tools: ToolLike[] = [
      { name: "send_email", description: "Send a message to a user." },
      { name: "post_message", description: "Post to a channel." },
    ];
    expect(searchTools(tools, "message").map((r) => r.name)).toEqual(["post_message", "send_email"]);
  });

  test("results carry name, identifier, summary, signature and score, best first", () => {
    const [first, second] = searchTools(catalog, "sum", { limit: 2 });
    expect(first).toEqual({
      name: "get-sum",
      identifier: "get_sum",
      summary: "Returns the sum of two numbers",
      signature: renderToolSignature(catalog.find((t) => t.name === "get-sum") as ToolLike),
      score: expect.any(Number),
    });
    expect(first?.signature).toContain("a: number;");
    if (second !== undefined) expect(second.score).toBeLessThan(first?.score ?? 0);
  });

  test("limit, no match and empty queries", () => {
    expect(searchTools(catalog, "file", { limit: 4 })).toHaveLength(4);
    expect(searchTools(catalog, "file").length).toBeLessThanOrEqual(10);
    expect(searchTools(catalog, "xylophone")).toEqual([]);
    expect(searchTools(catalog, "  the  ")).toEqual([]);
    expect(searchTools(catalog, "file", { limit: 0 })).toEqual([]);
  });
});

describe("describeTool", () => {
  test("returns the full declaration of one tool, by name or identifier", () => {
    const expected = [
      "declare const tools: {",
      "  /**",
      "   * Returns the sum of two numbers",
      '   * Original name: "get-sum"',
      "   */",
      "  get_sum(args: {",
      "    // First number",
      "    a: number;",
      "    // Second number",
      "    b: number;",
      "  }): Promise<unknown>;",
      "};",
    ].join("\n");
    expect(describeTool(catalog, "get-sum")).toBe(expected);
    expect(describeTool(catalog, "get_sum")).toBe(expected);
    expect(describeTool(catalog, "GET_SUM")).toBe(expected);
  });

  test("an unknown name throws with did-you-mean suggestions", () => {
    expect(() => describeTool(catalog, "reed_file")).toThrowError(
      /^Unknown tool "reed_file"\. Did you mean "read_file"/,
    );
    expect(() => describeTool(catalog, "pull_request")).toThrowError(/Did you mean .*"get_pull_request"/);
    expect(() => describeTool(catalog, "zzzzzzzz")).toThrowError(
      'Unknown tool "zzzzzzzz". No tool has a similar name (65 tools in the catalog).',
    );
  });
});

describe("renderToolIndex and the automatic switch", () => {
  test("the index lists each tool with a one-line summary and says how to get a full declaration", () => {
    const tools: ToolLike[] = [
      { name: "read_file", description: "Read a file. Returns its text.\nSecond line.", inputSchema: {} },
      { name: "get-sum", description: "Add two numbers" },
      { name: "log", spread: true },
      { name: "ping" },
    ];
    expect(renderToolIndex(tools)).toBe(
      [
        "/**",
        " * Index of 4 tools: each line gives a tool's name and what it does, not its parameters.",
        ` * ${DEFAULT_INDEX_HINT}`,
        " */",
        "declare const tools: {",
        "  read_file(args: unknown): Promise<unknown>; // Read a file.",
        "  get_sum(args: unknown): Promise<unknown>; // Add two numbers",
        "  log(...args: unknown[]): Promise<unknown>;",
        "  ping(args: unknown): Promise<unknown>;",
        "};",
      ].join("\n"),
    );
  });

  test("long summaries are shortened", () => {
    const tools: ToolLike[] = [{ name: "t", description: `${"word ".repeat(60)}end.` }];
    const line = renderToolIndex(tools, { summaryMaxChars: 40 }).split("\n")[5] ?? "";
    expect(line).toBe("  t(args: unknown): Promise<unknown>; // word word word word word word word word…");
  });

  test(`renderDeclarations switches to the index past INDEX_THRESHOLD_TOOLS (${INDEX_THRESHOLD_TOOLS})`, () => {
    const atThreshold = renderDeclarations({ tools: syntheticCatalog(INDEX_THRESHOLD_TOOLS) });
    expect(atThreshold).not.toContain("Index of");
    expect(atThreshold).toContain("    n?: number;");
    const past = renderDeclarations({ tools: syntheticCatalog(INDEX_THRESHOLD_TOOLS + 1) });
    expect(past).toBe(renderToolIndex(syntheticCatalog(INDEX_THRESHOLD_TOOLS + 1)));
    expect(past).toContain(`Index of ${INDEX_THRESHOLD_TOOLS + 1} tools`);
    expect(past).toContain('describeTool("<name>")');
    expect(past).toContain("  tool_7(args: unknown): Promise<unknown>; // Tool number 7.");
    expect(past).not.toContain("n?: number");
  });

  test("the threshold and the hint are options; globals stay declared in full", () => {
    const tools = syntheticCatalog(5);
    const indexed = renderDeclarations(
      { tools, globals: [{ name: "help", inputSchema: { type: "string" } }] },
      { indexThreshold: 3, indexHint: "Call help(name) for a tool's declaration." },
    );
    expect(indexed).toContain(" * Call help(name) for a tool's declaration.");
    expect(indexed).toContain("declare function help(args: string): Promise<unknown>;");
    expect(
      renderDeclarations({ tools: syntheticCatalog(100) }, { indexThreshold: Number.POSITIVE_INFINITY }),
    ).toContain("tool_99(args: {");
  });

  test("the index is much smaller than the full declarations", () => {
    const full = renderDeclarations({ tools: catalog }, { indexThreshold: Number.POSITIVE_INFINITY });
    const index = renderDeclarations({ tools: catalog });
    expect(index).toContain("Index of 65 tools");
    expect(index.length * 3).toBeLessThan(full.length);
  });
});
