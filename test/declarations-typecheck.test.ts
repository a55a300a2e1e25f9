import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  describeTool,
  renderDeclarations,
  renderToolIndex,
  renderToolSignature,
  type ToolLike,
} from "airlock-codemode/declarations";
import ts from "typescript";
import { describe, expect, test } from "vitest";
import { z } from "zod";

const fixtures = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "schemas");

function loadTools(file: string): ToolLike[] {
  return (JSON.parse(readFileSync(join(fixtures, file), "utf8")) as { tools: ToolLike[] }).tools;
}

const everything = loadTools("mcp-server-everything.json");
const filesystem = loadTools("mcp-server-filesystem.json");
const memory = loadTools("mcp-server-memory.json");
const github = loadTools("mcp-server-github.json");
const hard = loadTools("hard-schemas.json");

const Tree: z.ZodType<{ label: string; children: unknown[] }> = z.object({
  label: z.string(),
  get children() {
    return z.array(Tree);
  },
});

/** Tools described with zod 4 schemas, converted by zod's own `z.toJSONSchema`. */
const zodTools: ToolLike[] = [
  {
    name: "search_docs",
    description: "Search the documentation",
    inputSchema: z.object({
      query: z.string().min(1).describe("What to look for"),
      limit: z.number().int().min(1).max(50).default(10),
      sections: z.array(z.enum(["api", "guide", "faq"])).optional(),
      since: z.date().optional(),
    }),
    outputSchema: z.object({
      hits: z.array(z.object({ title: z.string(), url: z.url(), score: z.number().nullable() })),
      next: z.string().optional(),
    }),
  },
  { name: "save_tree", description: "Save a tree", inputSchema: z.object({ tree: Tree, overwrite: z.boolean() }) },
  {
    name: "tag_items",
    description: "Raw zod shape, as the MCP SDK takes it",
    inputSchema: { ids: z.array(z.string()) },
  },
  {
    name: "pick_shape",
    inputSchema: z.discriminatedUnion("kind", [
      z.object({ kind: z.literal("circle"), radius: z.number() }),
      z.object({ kind: z.literal("rect"), size: z.tuple([z.number(), z.number()]) }),
    ]),
    outputSchema: z.record(z.string(), z.number()),
  },
];

const globals: ToolLike[] = [
  {
    name: "models.classify",
    description: "Classify a text",
    inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
    outputSchema: { type: "string", enum: ["positive", "negative"] },
  },
  { name: "models.embed", inputSchema: { type: "object", properties: { text: { type: "string" } } } },
  { name: "models", description: "A function and a namespace of the same name merge" },
  { name: "log", spread: true, inputSchema: { type: "array", items: { type: "string" } } },
  { name: "pair", spread: true, inputSchema: { type: "array", prefixItems: [{ type: "string" }, { type: "number" }] } },
  { name: "anything", spread: true, inputSchema: { type: "object" } },
  {
    name: "fetchUser",
    signature: "(id: string, options?: { fresh?: boolean }): Promise<{ id: string; name: string }>",
  },
  { name: "a.b.c", description: "Nested namespaces" },
  { name: "delete", description: "A reserved word: not declarable" },
  { name: "my-global", description: "Not an identifier: not declarable" },
  { name: "tools", description: "Would clash with `declare const tools`" },
];

const corpus: ToolLike[] = [...everything, ...filesystem, ...memory, ...github, ...hard, ...zodTools];

// ---------------------------------------------------------------------------------------------------------------
// An in-memory TypeScript program: the rendered declarations plus a script that uses them.

const baseOptions: ts.CompilerOptions = {
  strict: true,
  noEmit: true,
  target: ts.ScriptTarget.ES2022,
  lib: ["lib.es2023.d.ts"],
  types: [],
  noUncheckedIndexedAccess: true,
  skipLibCheck: false,
  skipDefaultLibCheck: true,
};

const libCache = new Map<string, ts.SourceFile | undefined>();
const ROOT = "/airlock-typecheck";

interface Diagnostic {
  file: string | undefined;
  line: number | undefined;
  code: number;
  message: string;
}

/** Type-checks in-memory files (names relative to a virtual root) and returns every diagnostic. */
function typecheck(files: Record<string, string>, extra: ts.CompilerOptions = {}): Diagnostic[] {
  const options = { ...baseOptions, ...extra };
  const virtual = new Map(Object.entries(files).map(([name, text]) => [`${ROOT}/${name}`, text]));
  const host = ts.createCompilerHost(options);
  const readLib = host.getSourceFile.bind(host);
  host.getSourceFile = (fileName, languageVersion, onError) => {
    const text = virtual.get(fileName);
    if (text !== undefined) return ts.createSourceFile(fileName, text, languageVersion, true);
    if (!libCache.has(fileName)) libCache.set(fileName, readLib(fileName, languageVersion, onError));
    return libCache.get(fileName);
  };
  host.fileExists = (fileName) => virtual.has(fileName) || ts.sys.fileExists(fileName);
  host.readFile = (fileName) => virtual.get(fileName) ?? ts.sys.readFile(fileName);
  host.writeFile = () => {};
  const program = ts.createProgram([...virtual.keys()], options, host);
  return ts.getPreEmitDiagnostics(program).map((d) => ({
    file: d.file?.fileName.slice(ROOT.length + 1),
    line: d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line + 1 : undefined,
    code: d.code,
    message: ts.flattenDiagnosticMessageText(d.messageText, "\n"),
  }));
}

/** Compiles declarations alone (as a global .d.ts) and with a script calling them. */
function check(declarations: string, script = "", extra: ts.CompilerOptions = {}): Diagnostic[] {
  const files: Record<string, string> = { "declarations.d.ts": declarations };
  if (script !== "") files["main.ts"] = `async function main(): Promise<void> {\n${script}\n}\nvoid main;\n`;
  return typecheck(files, extra);
}

/** Script lines that call tools of the corpus with correct arguments and use their typed results. */
const correctCalls = `
  const file = await tools.read_text_file({ path: "/tmp/notes.txt", head: 10 });
  const text: string = file.content;
  await tools.edit_file({ path: "a.ts", edits: [{ oldText: "a", newText: "b" }], dryRun: true });
  const media = await tools.read_media_file({ path: "cat.png" });
  for (const part of media.content) {
    if (part.type === "resource") part.resource.blob.toUpperCase();
    else part.mimeType.toLowerCase();
  }
  await tools.get_sum({ a: 1, b: 2 });
  await tools.get_env({});
  const weather = await tools.get_structured_content({ location: "Chicago" });
  const celsius: number = weather.temperature;
  await tools.create_entities({ entities: [{ name: "Ada", entityType: "person", observations: ["wrote notes"] }] });
  await tools.create_pull_request_review({
    owner: "o", repo: "r", pull_number: 1, body: "LGTM", event: "APPROVE",
    comments: [{ path: "a.ts", line: 3, body: "nit" }, { path: "b.ts", position: 1, body: "ok" }],
  });
  await tools.list_issues({ owner: "o", repo: "r", state: "open", labels: ["bug"] });
  await tools.create_contact({
    name: "Ada",
    home: { street: "1 Main St", city: "Springfield", zip: "12345" },
    phones: ["+15550100"],
    slashed: "slash",
  });
  await tools.tree_insert({ root: { value: 1, children: [{ anything: true }] }, pair: { b: { label: "x" } } });
  await tools.send_message({ target: { kind: "channel", channel: "general", thread: null }, text: ["a", "b"] });
  await tools.send_message({ target: { kind: "user", userId: "u1" }, text: "hi", priority: 2, mode: "new\\nline" });
  await tools.query_events({ name: "launch", limit: 5 });
  await tools.update_record({ record: { id: "r1", updatedAt: "2024-01-01T00:00:00Z", note: "n" }, either: 3 });
  await tools.plot_points({ point: [1, 2], partial: ["a"], withRest: ["s", 1, 2, 3], matrix: [[1, null]] });
  await tools.weird_keys_tool({ "my-key": "k", "": "empty", class: "c", notDeclared: 1, "new\\nline": "n" });
  await tools.set_labels({ labels: { a: "b" }, counts: { total: 3, extra: 4 }, env: { HOME: "/root" } });
  const fromMyTool: string = await tools["my-tool"]({ x: "1" });
  const fromMy_tool: number = await tools.my_tool({ y: 1 });
  await tools.no_schema("anything at all");
  await tools.class({});
  await tools._fast({ n: 1 });
  await tools.new({ kind: "thing" });
  await tools.constructor({ new: true });
  const docs = await tools.search_docs({ query: "install" });
  const firstUrl: string | undefined = docs.hits[0]?.url;
  await tools.save_tree({ tree: { label: "root", children: [] }, overwrite: false });
  await tools.tag_items({ ids: ["a"] });
  await tools.pick_shape({ kind: "rect", size: [1, 2] });
  const counts = await tools.pick_shape({ kind: "circle", radius: 1 });
  const one: number | undefined = counts.anything;
  void [text, celsius, fromMyTool, fromMy_tool, firstUrl, one];
`;

const correctGlobalCalls = `
  const label: "positive" | "negative" = await models.classify({ text: "great" });
  await models.embed({});
  await models({});
  await log("a", "b", "c");
  await pair("x", 1);
  await anything(1, "two", null);
  const user = await fetchUser("u1", { fresh: true });
  const name: string = user.name;
  await a.b.c(undefined);
  void [label, name];
`;

describe("rendered declarations type-check", () => {
  const full = renderDeclarations({ tools: corpus, globals }, { indexThreshold: Number.POSITIVE_INFINITY });

  test("the corpus renders in full: real MCP tool lists, hand-written hard schemas and zod schemas", () => {
    expect(corpus.length).toBeGreaterThan(70);
    expect(full).toContain("declare const tools: {");
    expect(full).toContain("  create_pull_request_review(args: {");
    expect(full).toContain("declare namespace models {");
    expect(full).toContain('// Global "delete" is not declared');
  });

  test("the harness reports errors inside a declaration file", () => {
    const broken = check("declare const x: { a: string; [key: string]: number };\ndeclare function delete(): void;");
    expect(broken.map((d) => [d.file, d.line, d.code])).toEqual(
      expect.arrayContaining([
        ["declarations.d.ts", 1, 2411],
        ["declarations.d.ts", 2, expect.any(Number)],
      ]),
    );
  });

  test("declarations alone compile without diagnostics", () => {
    expect(check(full)).toEqual([]);
  });

  test("a script calling the tools and globals with correct arguments compiles without diagnostics", () => {
    expect(check(full, correctCalls + correctGlobalCalls)).toEqual([]);
  });

  test("the same holds under exactOptionalPropertyTypes", () => {
    expect(check(full, correctCalls + correctGlobalCalls, { exactOptionalPropertyTypes: true })).toEqual([]);
  });

  const wrongCalls: [string, string, RegExp][] = [
    ["a missing required property", "await tools.get_sum({ a: 1 });", /Property 'b' is missing/],
    ["a value outside an enum", 'await tools.get_structured_content({ location: "Paris" });', /"Paris"/],
    ["a misspelled property", 'await tools.read_text_file({ pth: "x" });', /'pth'/],
    ["a wrong property type", "await tools.get_sum({ a: 1, b: '2' });", /not assignable to type 'number'/],
    ["an unknown tool", "await tools.no_such_tool({});", /Property 'no_such_tool' does not exist/],
    ["a wrong discriminant", 'await tools.pick_shape({ kind: "square", radius: 1 });', /"square"/],
    ["a wrong tuple length", "await tools.plot_points({ point: [1, 2, 3] });", /not assignable/],
    [
      "a result used as the wrong type",
      "const n: number = (await tools.read_text_file({ path: 'a' })).content;",
      /'string' is not assignable to type 'number'/,
    ],
    ["a wrong global argument", "await log(1);", /'number' is not assignable to parameter of type 'string'/],
    ["an undeclared global", "await delete_(1);", /Cannot find name 'delete_'/],
  ];

  test.each(wrongCalls)("a deliberately wrong call is reported: %s", (_, call, message) => {
    const diagnostics = check(full, `  ${call}`);
    expect(diagnostics.length).toBeGreaterThan(0);
    expect(diagnostics.every((d) => d.file === "main.ts" && d.line === 2)).toBe(true);
    expect(diagnostics.map((d) => d.message).join("\n")).toMatch(message);
  });

  test("every degraded form still compiles with the calls that fit it", () => {
    for (const maxChars of [600, 200, 80, 30, 5]) {
      const small = renderDeclarations(
        { tools: corpus, globals },
        { indexThreshold: Number.POSITIVE_INFINITY, inputSchemaMaxChars: maxChars, outputSchemaMaxChars: maxChars },
      );
      expect(small.length).toBeLessThan(full.length);
      expect(check(small, "  await tools.get_sum({ a: 1, b: 2 });")).toEqual([]);
    }
  });

  test("the index of a large catalog and each described tool compile", () => {
    const index = renderToolIndex(corpus);
    expect(check(index, "  await tools.read_text_file({ path: 'x' });\n  await tools['my-tool']('loose');")).toEqual(
      [],
    );
    for (const tool of corpus) {
      const described = describeTool(corpus, tool.name);
      expect(check(described), tool.name).toEqual([]);
    }
    const described = describeTool(corpus, "get-sum");
    expect(check(described, "  await tools.get_sum({ a: 1, b: 2 });")).toEqual([]);
    expect(check(described, "  await tools.get_sum({ a: 1 });").length).toBeGreaterThan(0);
  });

  test("signatures of single tools are valid function types", () => {
    const aliases = corpus
      .map((tool, i) => `interface Signature${i} {\n  call${renderToolSignature(tool)};\n}`)
      .join("\n");
    expect(check(aliases)).toEqual([]);
  });
});
