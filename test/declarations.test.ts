import {
  DEFAULT_INPUT_SCHEMA_MAX_CHARS,
  MAX_REF_EXPANSIONS,
  MAX_SCHEMA_NODES,
  renderDeclarations,
  renderToolIndex,
  renderToolOutputType,
  renderToolSignature,
  resolveSchemaRef,
  schemaToType,
  type ToolLike,
} from "airlock-codemode/declarations";
import { describe, expect, test } from "vitest";
import { z } from "zod";
import { isZodSchema } from "../dist/declarations/zod.js";

const lines = (...text: string[]) => text.join("\n");

describe("renderDeclarations", () => {
  test("refuses a catalog it cannot read with a TypeError naming the entry", () => {
    const render = (catalog: unknown, options?: unknown) => () =>
      renderDeclarations(catalog as Parameters<typeof renderDeclarations>[0], options as object);
    expect(render(null)).toThrow("renderDeclarations needs { tools, globals }");
    expect(render({ tools: 5 })).toThrow("tools must be an array of tools");
    expect(render({ tools: [{ name: "a" }, null] })).toThrow("tools[1] is not an object");
    expect(render({ tools: [{ name: Symbol("x") }] })).toThrow("tools[0] has no name (a non-empty string)");
    expect(render({ tools: [{ name: "a", description: 5 }] })).toThrow(
      'tools[0] ("a") has a description that is not a string',
    );
    expect(render({ globals: [{}] })).toThrow("globals[0] has no name");
    expect(render({ tools: [] }, null)).toThrow("renderDeclarations options must be an object");
    expect(() => renderToolIndex("tools" as never)).toThrow("tools must be an array of tools");
  });

  test("renders a tool in the documented shape", () => {
    const read: ToolLike = {
      name: "read",
      description: "Read a file",
      inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
      outputSchema: { type: "string" },
    };
    expect(renderDeclarations({ tools: [read] })).toBe(
      lines(
        "declare const tools: {",
        "  /** Read a file */",
        "  read(args: {",
        "    path: string;",
        "  }): Promise<string>;",
        "};",
      ),
    );
  });

  test("property descriptions become // comments with constraint tags", () => {
    const tool: ToolLike = {
      name: "list_items",
      description: "List items.\nPaginated.",
      inputSchema: {
        type: "object",
        properties: {
          limit: { type: "integer", minimum: 1, maximum: 100, default: 20, description: "Page size" },
          cursor: { type: "string", pattern: "^[a-z0-9]+$", maxLength: 64 },
          ids: { type: "array", items: { type: "string", format: "uuid" }, minItems: 1, maxItems: 10 },
          note: { type: "string", description: "First line\nSecond line", deprecated: true },
        },
        required: ["ids"],
      },
    };
    expect(renderDeclarations({ tools: [tool] })).toBe(
      lines(
        "declare const tools: {",
        "  /**",
        "   * List items.",
        "   * Paginated.",
        "   */",
        "  list_items(args: {",
        "    // Page size @integer @minimum 1 @maximum 100 @default 20",
        "    limit?: number;",
        "    // @maxLength 64 @pattern ^[a-z0-9]+$",
        "    cursor?: string;",
        "    // @minItems 1 @maxItems 10 @items.format uuid",
        "    ids: string[];",
        "    // First line",
        "    // Second line @deprecated",
        "    note?: string;",
        "  }): Promise<unknown>;",
        "};",
      ),
    );
  });

  test("a missing schema gives args: unknown and Promise<unknown>", () => {
    expect(renderDeclarations({ tools: [{ name: "ping" }] })).toBe(
      lines("declare const tools: {", "  ping(args: unknown): Promise<unknown>;", "};"),
    );
  });

  test("tool names that are not identifiers use the script identifier, with the original name in a comment", () => {
    const text = renderDeclarations({
      tools: [
        { name: "get-sum", description: "Add", inputSchema: { type: "object", properties: {} } },
        { name: "my-tool" },
        { name: "my_tool" },
        { name: "2fast" },
      ],
    });
    expect(text).toBe(
      lines(
        "declare const tools: {",
        "  /**",
        "   * Add",
        '   * Original name: "get-sum"',
        "   */",
        "  get_sum(args: {}): Promise<unknown>;",
        '  "my-tool"(args: unknown): Promise<unknown>;',
        "  my_tool(args: unknown): Promise<unknown>;",
        '  /** Original name: "2fast" */',
        "  _fast(args: unknown): Promise<unknown>;",
        "};",
      ),
    );
  });

  test("a tool named new gets a quoted key: new(…) in a type literal is a construct signature", () => {
    expect(renderDeclarations({ tools: [{ name: "new" }, { name: "get" }] })).toBe(
      lines(
        "declare const tools: {",
        '  "new"(args: unknown): Promise<unknown>;',
        "  get(args: unknown): Promise<unknown>;",
        "};",
      ),
    );
  });

  test("comment text cannot close a JSDoc comment early", () => {
    const text = renderDeclarations({ tools: [{ name: "x", description: "a */ b" }] });
    expect(text).toContain("/** a *\\/ b */");
  });

  test("globals render as functions, namespaces, rest parameters and given signatures", () => {
    const globals: ToolLike[] = [
      {
        name: "models.classify",
        description: "Classify a text",
        inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
        outputSchema: { enum: ["positive", "negative"] },
      },
      { name: "log", spread: true, inputSchema: { type: "array", items: { type: "string" } } },
      { name: "fetchUser", signature: "(id: string): Promise<User>" },
      { name: "sleep", inputSchema: { type: "number" } },
      { name: "delete" },
      { name: "tools" },
    ];
    expect(renderDeclarations({ tools: [{ name: "t" }], globals })).toBe(
      lines(
        "declare const tools: {",
        "  t(args: unknown): Promise<unknown>;",
        "};",
        "",
        "declare function log(...args: string[]): Promise<unknown>;",
        "declare function fetchUser(id: string): Promise<User>;",
        "declare function sleep(args: number): Promise<unknown>;",
        "declare namespace models {",
        "  /** Classify a text */",
        "  function classify(args: {",
        "    text: string;",
        '  }): Promise<"positive" | "negative">;',
        "}",
        '// Global "delete" is not declared: scripts cannot call it by that name.',
        '// Global "tools" is not declared: scripts cannot call it by that name.',
      ),
    );
  });

  test("without tools a global named tools is declared", () => {
    expect(renderDeclarations({ globals: [{ name: "tools" }] })).toBe(
      "declare function tools(args: unknown): Promise<unknown>;",
    );
  });

  test("nested namespaces", () => {
    expect(renderDeclarations({ globals: [{ name: "a.b.c" }, { name: "a.d" }] })).toBe(
      lines(
        "declare namespace a {",
        "  function d(args: unknown): Promise<unknown>;",
        "  namespace b {",
        "    function c(args: unknown): Promise<unknown>;",
        "  }",
        "}",
      ),
    );
  });

  test("a spread global without an array schema takes unknown[]", () => {
    expect(renderToolSignature({ name: "f", spread: true, inputSchema: { type: "object" } })).toBe(
      "(...args: unknown[]): Promise<unknown>",
    );
    expect(
      renderToolSignature({
        name: "f",
        spread: true,
        inputSchema: { type: "array", prefixItems: [{ type: "string" }, { type: "number" }] },
      }),
    ).toBe("(...args: [string, number]): Promise<unknown>");
  });
});

describe("schemaToType", () => {
  test("enums, const and JSON-quoted literals", () => {
    expect(schemaToType({ enum: ["a", 'q"uote', 1, true, null] })).toBe('"a" | "q\\"uote" | 1 | true | null');
    expect(schemaToType({ const: "fixed" })).toBe('"fixed"');
    expect(schemaToType({ const: { a: [1, "x"], "b-c": null } })).toBe('{ a: [1, "x"]; "b-c": null }');
    expect(schemaToType({ type: "string", enum: [] })).toBe("never");
  });

  test("nullable: type arrays and OpenAPI nullable", () => {
    expect(schemaToType({ type: ["string", "null"] })).toBe("string | null");
    expect(schemaToType({ type: "integer", nullable: true })).toBe("number | null");
    expect(schemaToType({ type: ["integer", "number"] })).toBe("number");
  });

  test("unions and intersections", () => {
    expect(schemaToType({ anyOf: [{ type: "string" }, { type: "array", items: { type: "number" } }] })).toBe(
      "string | number[]",
    );
    expect(schemaToType({ oneOf: [{ type: "string" }, {}] })).toBe("unknown");
    expect(schemaToType({ type: "array", items: { oneOf: [{ type: "string" }, { type: "boolean" }] } })).toBe(
      "(string | boolean)[]",
    );
    expect(schemaToType({ allOf: [{ anyOf: [{ type: "string" }, { type: "number" }] }, { type: "number" }] })).toBe(
      "(string | number) & number",
    );
  });

  test("allOf of objects merges into one object", () => {
    const schema = {
      definitions: { Base: { type: "object", properties: { id: { type: "string" } }, required: ["id"] } },
      allOf: [{ $ref: "#/definitions/Base" }, { properties: { name: { type: "string" } } }],
    };
    expect(schemaToType(schema)).toBe(lines("{", "  id: string;", "  name?: string;", "}"));
  });

  test("oneOf variants are merged with the properties beside them", () => {
    const schema = {
      type: "object",
      properties: { id: { type: "string" }, name: { type: "string" } },
      oneOf: [{ required: ["id"] }, { required: ["name"] }],
    };
    expect(schemaToType(schema, { descriptions: false })).toBe(
      lines("{", "  id: string;", "  name?: string;", "} | {", "  id?: string;", "  name: string;", "}"),
    );
  });

  test("tuples: prefixItems, array-form items, optional and rest elements", () => {
    expect(schemaToType({ type: "array", prefixItems: [{ type: "number" }, { type: "string" }], items: false })).toBe(
      "[number, string]",
    );
    expect(schemaToType({ type: "array", items: [{ type: "string" }, { type: "boolean" }] })).toBe("[string, boolean]");
    expect(schemaToType({ type: "array", items: [{ type: "string" }], additionalItems: { type: "number" } })).toBe(
      "[string, ...number[]]",
    );
    expect(
      schemaToType({
        type: "array",
        prefixItems: [{ type: "string" }, { anyOf: [{ type: "number" }, { type: "null" }] }],
        minItems: 1,
      }),
    ).toBe("[string, (number | null)?]");
    expect(schemaToType({ type: "array" })).toBe("unknown[]");
  });

  test("additionalProperties and patternProperties become index signatures that admit every property", () => {
    expect(schemaToType({ type: "object", additionalProperties: { type: "number" } })).toBe(
      "{ [key: string]: number }",
    );
    expect(schemaToType({ type: "object" })).toBe("{ [key: string]: unknown }");
    expect(schemaToType({ type: "object", properties: {} })).toBe("{}");
    expect(schemaToType({ type: "object", additionalProperties: false })).toBe("{}");
    expect(
      schemaToType({
        type: "object",
        properties: { total: { type: "integer" }, note: { type: "string" } },
        required: ["total"],
        additionalProperties: { type: "integer" },
      }),
    ).toBe(
      lines(
        "{",
        "  // @integer",
        "  total: number;",
        "  note?: string;",
        "  [key: string]: number | string | undefined;",
        "}",
      ),
    );
    expect(schemaToType({ type: "object", patternProperties: { "^x-": { type: "string" } } })).toBe(
      "{ [key: string]: string }",
    );
  });

  test("required vs optional, undeclared required names, and keys that are not identifiers", () => {
    const schema = {
      type: "object",
      properties: { "my-key": { type: "string" }, ok: { type: "string" }, "": { type: "number" }, 'a"b': {} },
      required: ["my-key", "missing"],
    };
    expect(schemaToType(schema)).toBe(
      lines(
        "{",
        '  "my-key": string;',
        "  ok?: string;",
        '  ""?: number;',
        '  "a\\"b"?: unknown;',
        "  missing: unknown;",
        "}",
      ),
    );
  });

  test("local $refs expand, including JSON-pointer escapes and percent-encoding", () => {
    const schema = {
      $defs: { "a/b": { type: "string" }, "c~d": { type: "number" }, "e f": { type: "boolean" } },
      type: "object",
      properties: {
        slash: { $ref: "#/$defs/a~1b" },
        tilde: { $ref: "#/$defs/c~0d" },
        space: { $ref: "#/$defs/e%20f" },
        items: { $ref: "#/properties/slash" },
      },
      required: ["slash", "tilde", "space", "items"],
    };
    expect(schemaToType(schema)).toBe(
      lines("{", "  slash: string;", "  tilde: number;", "  space: boolean;", "  items: string;", "}"),
    );
  });

  test("recursive, remote and dangling references render as unknown", () => {
    const schema = {
      $defs: {
        Node: {
          type: "object",
          properties: { value: { type: "number" }, next: { $ref: "#/$defs/Node" } },
          required: ["value"],
        },
      },
      type: "object",
      properties: {
        node: { $ref: "#/$defs/Node" },
        self: { $ref: "#" },
        remote: { $ref: "https://example.com/x.json" },
        dangling: { $ref: "#/$defs/Nope" },
      },
    };
    expect(schemaToType(schema)).toBe(
      lines(
        "{",
        "  node?: {",
        "    value: number;",
        "    next?: unknown;",
        "  };",
        "  self?: unknown;",
        "  remote?: unknown;",
        "  dangling?: unknown;",
        "}",
      ),
    );
  });

  test("a description on the $ref wins over the target's", () => {
    const schema = {
      definitions: { Id: { type: "string", description: "An id", format: "uuid" } },
      type: "object",
      properties: { a: { $ref: "#/definitions/Id" }, b: { $ref: "#/definitions/Id", description: "Owner" } },
    };
    expect(schemaToType(schema)).toBe(
      lines("{", "  // An id @format uuid", "  a?: string;", "  // Owner @format uuid", "  b?: string;", "}"),
    );
  });

  test("reference expansion is bounded: a fan-out of references stops at the expansion limit", () => {
    // Each level references the next twice: 2^20 expansions without a bound.
    const $defs: Record<string, unknown> = { L20: { type: "string" } };
    for (let i = 0; i < 20; i++) {
      $defs[`L${i}`] = {
        type: "object",
        properties: { a: { $ref: `#/$defs/L${i + 1}` }, b: { $ref: `#/$defs/L${i + 1}` } },
      };
    }
    const started = performance.now();
    const text = schemaToType({ $defs, $ref: "#/$defs/L0" }, { maxChars: Number.POSITIVE_INFINITY });
    expect(performance.now() - started).toBeLessThan(5000);
    expect(text).toContain("unknown");
    expect(text.split("{").length - 1).toBeLessThanOrEqual(MAX_REF_EXPANSIONS + 1);
  });

  test("shared subschemas are bounded too: 2^40 paths through a chain of shared objects", () => {
    let shared: Record<string, unknown> = { type: "string" };
    for (let i = 0; i < 40; i++) shared = { type: "object", properties: { a: shared, b: shared } };
    const started = performance.now();
    const text = schemaToType(shared, { maxChars: Number.POSITIVE_INFINITY });
    expect(performance.now() - started).toBeLessThan(5000);
    expect(text).toContain("unknown");
    expect(text.split("\n").length).toBeLessThan(2 * MAX_SCHEMA_NODES + 10);
  });

  test("a schema object that contains itself renders the cycle as unknown", () => {
    const node: Record<string, unknown> = { type: "object", properties: {} };
    (node.properties as Record<string, unknown>).child = node;
    expect(schemaToType(node)).toBe(lines("{", "  child?: unknown;", "}"));
  });

  test("boolean schemas", () => {
    expect(schemaToType(true)).toBe("unknown");
    expect(schemaToType(false)).toBe("never");
    expect(schemaToType({})).toBe("unknown");
  });

  test("an enum of 200,000 values renders, summarised like any type over the size limit", () => {
    const values = Array.from({ length: 200_000 }, (_, i) => `v${i}`);
    expect(schemaToType({ enum: values })).toBe("unknown");
    const object = { type: "object", properties: { v: { enum: values } } };
    expect(schemaToType(object)).toBe("{ [key: string]: unknown }");
    expect(schemaToType({ enum: values.slice(0, 3) })).toBe('"v0" | "v1" | "v2"');
  });

  test("const and enum values too deep, too large or cyclic render as their base type", () => {
    const deep = JSON.parse(`{"const": ${"[".repeat(10_000)}${"]".repeat(10_000)}}`);
    expect(schemaToType(deep)).toBe("unknown[]");
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.me = cyclic;
    expect(schemaToType({ const: cyclic })).toBe("{ [key: string]: unknown }");
    expect(schemaToType({ enum: [cyclic, "x"] })).toBe(`{ [key: string]: unknown } | "x"`);
    // Shared, not cyclic: 10^16 paths through 16 small arrays.
    let wide: unknown = 1;
    for (let i = 0; i < 16; i++) wide = Array(10).fill(wide);
    expect(schemaToType({ const: wide }, { maxChars: Number.POSITIVE_INFINITY })).toBe("unknown[]");
    expect(schemaToType({ const: { a: [1, { b: null }] } })).toBe("{ a: [1, { b: null }] }");
    expect(schemaToType({ enum: [Number.NaN, null] })).toBe("number | null");
  });

  test("BigInt values: const and enum as number, defaults and bounds as their digits", () => {
    expect(schemaToType({ const: 10n })).toBe("number");
    expect(schemaToType({ enum: [1n, "a"] })).toBe(`number | "a"`);
    expect(schemaToType({ type: "object", properties: { n: { type: "integer", default: 10n, minimum: 1n } } })).toBe(
      lines("{", "  // @integer @minimum 1 @default 10", "  n?: number;", "}"),
    );
  });

  test("a default too deep, too large or cyclic is written as far as its tag shows it", () => {
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.me = cyclic;
    const deep = JSON.parse(`${"[".repeat(10_000)}${"]".repeat(10_000)}`);
    for (const value of [cyclic, deep, Array(1_000_000).fill("x"), [new Date(0), 2n, undefined]]) {
      const text = schemaToType({ type: "object", properties: { a: { default: value } } });
      const tag = text.split("\n")[1] as string;
      expect(tag).toMatch(/^ {2}\/\/ @default /);
      expect(tag.length).toBeLessThanOrEqual(100);
    }
    const dates = schemaToType({ type: "object", properties: { a: { default: [new Date(0), 2n, undefined] } } });
    expect(dates).toContain('// @default ["1970-01-01T00:00:00.000Z",2,null]');
  });
});

describe("size limits", () => {
  const schema = {
    type: "object",
    properties: {
      query: { type: "string", description: "What to search for", minLength: 1 },
      filter: {
        type: "object",
        description: "Filters",
        properties: {
          status: { enum: ["open", "closed"], description: "Status" },
          owner: { type: "object", properties: { login: { type: "string" } } },
        },
      },
    },
    required: ["query"],
  };
  const full = schemaToType(schema, { maxChars: Number.POSITIVE_INFINITY });
  const noTags = schemaToType(schema, { tags: false, maxChars: Number.POSITIVE_INFINITY });
  const bare = schemaToType(schema, { tags: false, descriptions: false, maxChars: Number.POSITIVE_INFINITY });

  test("full form", () => {
    expect(full).toBe(
      lines(
        "{",
        "  // What to search for @minLength 1",
        "  query: string;",
        "  // Filters",
        "  filter?: {",
        "    // Status",
        '    status?: "open" | "closed";',
        "    owner?: {",
        "      login?: string;",
        "    };",
        "  };",
        "}",
      ),
    );
  });

  test("tags go first, then descriptions, then depth", () => {
    expect(schemaToType(schema, { maxChars: full.length - 1 })).toBe(noTags);
    expect(noTags).not.toContain("@minLength");
    expect(noTags).toContain("// What to search for");
    expect(schemaToType(schema, { maxChars: noTags.length - 1 })).toBe(bare);
    expect(bare).not.toContain("//");
    expect(schemaToType(schema, { maxChars: bare.length - 1 })).toBe(
      lines(
        "{",
        "  query: string;",
        "  filter?: {",
        '    status?: "open" | "closed";',
        "    owner?: { [key: string]: unknown };",
        "  };",
        "}",
      ),
    );
    expect(schemaToType(schema, { maxChars: 60 })).toBe(
      lines("{", "  query: string;", "  filter?: { [key: string]: unknown };", "}"),
    );
    expect(schemaToType(schema, { maxChars: 30 })).toBe("{ [key: string]: unknown }");
    expect(schemaToType(schema, { maxChars: 10 })).toBe("unknown");
  });

  test("shallow forms widen literals and keep array item types", () => {
    const wide = {
      type: "object",
      properties: { mode: { enum: ["a", "b", "c"] }, list: { type: "array", items: { enum: [1, 2] } } },
    };
    expect(schemaToType(wide, { maxChars: 40 })).toBe("{ [key: string]: unknown }");
    const nested = { type: "object", properties: { inner: wide } };
    expect(schemaToType(nested, { maxChars: 50 })).toBe(lines("{", "  inner?: { [key: string]: unknown };", "}"));
  });

  test("renderDeclarations applies DEFAULT_INPUT_SCHEMA_MAX_CHARS", () => {
    const properties: Record<string, unknown> = {};
    for (let i = 0; i < 120; i++) {
      properties[`field${i}`] = { type: "integer", minimum: 0, description: `The field number ${i} of the record` };
    }
    const tool: ToolLike = { name: "big", inputSchema: { type: "object", properties } };
    const unlimited = renderToolSignature(tool, { inputSchemaMaxChars: Number.POSITIVE_INFINITY });
    expect(unlimited.length).toBeGreaterThan(DEFAULT_INPUT_SCHEMA_MAX_CHARS);
    expect(unlimited).toContain("// The field number 0 of the record @integer @minimum 0");
    const limited = renderDeclarations({ tools: [tool] });
    expect(limited).not.toContain("@minimum");
    expect(limited).not.toContain("The field number");
    expect(limited).toContain("    field119?: number;");
    expect(renderToolSignature(tool).length).toBeLessThanOrEqual(DEFAULT_INPUT_SCHEMA_MAX_CHARS + 30);
  });
});

describe("resolveSchemaRef", () => {
  const root = {
    $defs: { "a/b": { type: "string" }, "m~n": { type: "number" }, "p q": { type: "null" }, list: [{ x: 1 }] },
    definitions: { Old: { type: "boolean" } },
    properties: { anchored: { $anchor: "here", type: "integer" } },
  };

  test("JSON pointers with escapes", () => {
    expect(resolveSchemaRef(root, "#/$defs/a~1b")).toEqual({ type: "string" });
    expect(resolveSchemaRef(root, "#/$defs/m~0n")).toEqual({ type: "number" });
    expect(resolveSchemaRef(root, "#/$defs/p%20q")).toEqual({ type: "null" });
    expect(resolveSchemaRef(root, "#/definitions/Old")).toEqual({ type: "boolean" });
    expect(resolveSchemaRef(root, "#/$defs/list/0")).toEqual({ x: 1 });
    expect(resolveSchemaRef(root, "#")).toBe(root);
  });

  test("anchors", () => {
    expect(resolveSchemaRef(root, "#here")).toEqual({ $anchor: "here", type: "integer" });
  });

  test("remote, dangling and inherited names resolve to undefined", () => {
    expect(resolveSchemaRef(root, "other.json#/$defs/x")).toBeUndefined();
    expect(resolveSchemaRef(root, "#/$defs/missing")).toBeUndefined();
    expect(resolveSchemaRef(root, "#/$defs/list/01")).toBeUndefined();
    expect(resolveSchemaRef(root, "#/$defs/toString")).toBeUndefined();
    expect(resolveSchemaRef(root, "#/%E0%A4%A")).toBeUndefined();
  });
});

describe("zod schemas", () => {
  test("are recognised by their internals", () => {
    expect(isZodSchema(z.string())).toBe(true);
    expect(isZodSchema({ type: "string" })).toBe(false);
    expect(isZodSchema(null)).toBe(false);
  });

  test("render through z.toJSONSchema, on the input or output side", () => {
    const tool: ToolLike = {
      name: "search",
      description: "Search",
      inputSchema: z.object({
        query: z.string().min(1).describe("What to look for"),
        limit: z.number().int().min(1).max(50).default(10),
        kind: z.enum(["a", "b"]).optional(),
        when: z.date().optional(),
      }),
      outputSchema: z.object({ hits: z.array(z.string()), total: z.number().default(0) }),
    };
    expect(renderDeclarations({ tools: [tool] })).toBe(
      lines(
        "declare const tools: {",
        "  /** Search */",
        "  search(args: {",
        "    // What to look for @minLength 1",
        "    query: string;",
        "    // @integer @minimum 1 @maximum 50 @default 10",
        "    limit?: number;",
        '    kind?: "a" | "b";',
        "    when?: unknown;",
        "  }): Promise<{",
        "    hits: string[];",
        "    total: number;",
        "  }>;",
        "};",
      ),
    );
  });

  test("recursive zod schemas, raw shapes and zod inside JSON Schema", () => {
    type Category = { name: string; subcategories: Category[] };
    const Category: z.ZodType<Category> = z.object({
      name: z.string(),
      get subcategories() {
        return z.array(Category);
      },
    });
    expect(schemaToType(Category)).toBe(lines("{", "  name: string;", "  subcategories: unknown[];", "}"));
    expect(schemaToType({ id: z.string(), count: z.number().optional() })).toBe(
      lines("{", "  id: string;", "  count?: number;", "}"),
    );
    const withZod = schemaToType({ type: "object", properties: { at: z.iso.datetime() }, required: ["at"] });
    expect(withZod).toMatch(/^\{\n {2}\/\/ @format date-time @pattern .+\n {2}at: string;\n\}$/);
  });

  test("the output side sees defaulted properties as present, and drops @default", () => {
    const schema = z.object({ n: z.number().default(1) });
    expect(schemaToType(schema)).toBe(lines("{", "  // @default 1", "  n?: number;", "}"));
    expect(schemaToType(schema, { io: "output" })).toBe(lines("{", "  n: number;", "}"));
    expect(renderToolOutputType({ name: "t", outputSchema: schema })).toBe(lines("{", "  n: number;", "}"));
  });
});

describe("renderToolSignature and renderToolOutputType", () => {
  const tool: ToolLike = {
    name: "get_weather",
    inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    outputSchema: { type: "object", properties: { celsius: { type: "number" } }, required: ["celsius"] },
  };

  test("signature is the parameter list and return type", () => {
    expect(renderToolSignature(tool)).toBe(
      lines("(args: {", "  city: string;", "}): Promise<{", "  celsius: number;", "}>"),
    );
    expect(renderToolOutputType(tool)).toBe(lines("{", "  celsius: number;", "}"));
    expect(renderToolOutputType({ name: "x" })).toBe("unknown");
  });

  test("a given signature replaces the generated one", () => {
    expect(renderToolSignature({ ...tool, signature: " (city: string): Promise<number> " })).toBe(
      "(city: string): Promise<number>",
    );
  });
});
