import vm from "node:vm";
import {
  CODEMODE_OPTIONS_LIMITS,
  CODEMODE_OPTIONS_PREFIX,
  CodemodeSourceError,
  type CodemodeSourceRule,
  parseCodemodeSource,
  stripTypeScript,
} from "airlock-codemode/source";
import { describe, expect, it } from "vitest";

/** Runs `fn` and returns the `CodemodeSourceError` it throws; fails the test if it throws nothing or another error. */
function sourceError(fn: () => unknown): CodemodeSourceError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(CodemodeSourceError);
    return error as CodemodeSourceError;
  }
  throw new Error("expected a CodemodeSourceError, but nothing was thrown");
}

function expectRule(text: string, rule: CodemodeSourceRule): CodemodeSourceError {
  const error = sourceError(() => parseCodemodeSource(text));
  expect(error.rule).toBe(rule);
  return error;
}

const AsyncFunction = (async () => {}).constructor as new (...args: string[]) => () => Promise<unknown>;

describe("parseCodemodeSource", () => {
  it("exports the options prefix", () => {
    expect(CODEMODE_OPTIONS_PREFIX).toBe("// @options:");
  });

  it("returns a script without an options line unchanged, with no options", () => {
    const text = "const x = 1;\n\nreturn x;\n";
    expect(parseCodemodeSource(text)).toEqual({ code: text, options: {} });
  });

  it("reads both options and replaces the options line by an empty line", () => {
    const text = '// @options: {"max_output_tokens": 2000, "timeout_ms": 30000}\nconst x = 1;\nreturn x;';
    const parsed = parseCodemodeSource(text);
    expect(parsed.options).toEqual({ maxOutputTokens: 2000, timeoutMs: 30000 });
    expect(parsed.code).toBe("\nconst x = 1;\nreturn x;");
    expect(parsed.code.split("\n")).toHaveLength(text.split("\n").length);
  });

  it("reads one option, an empty object, leading whitespace and CRLF line ends", () => {
    expect(parseCodemodeSource('// @options: {"timeout_ms": 5}\nx').options).toEqual({ timeoutMs: 5 });
    expect(parseCodemodeSource('// @options: {"max_output_tokens": 7}\nx').options).toEqual({ maxOutputTokens: 7 });
    expect(parseCodemodeSource("// @options: {}\nx")).toEqual({ code: "\nx", options: {} });
    expect(parseCodemodeSource('  \t// @options:{"timeout_ms":1}\n  x').options).toEqual({ timeoutMs: 1 });
    expect(parseCodemodeSource('// @options: {"timeout_ms": 9}\r\nx\r\ny\r\n')).toEqual({
      code: "\nx\r\ny\r\n",
      options: { timeoutMs: 9 },
    });
  });

  it("accepts the limits and rejects one past them", () => {
    expect(CODEMODE_OPTIONS_LIMITS).toEqual({ max_output_tokens: 1_000_000, timeout_ms: 3_600_000 });
    const at = parseCodemodeSource('// @options: {"max_output_tokens": 1000000, "timeout_ms": 3600000}\nx');
    expect(at.options).toEqual({ maxOutputTokens: 1_000_000, timeoutMs: 3_600_000 });
    // As in pi-codemode, no tokens at all may be asked for (only the note that the text was cut comes back).
    expect(parseCodemodeSource('// @options: {"max_output_tokens": 0}\nx').options).toEqual({ maxOutputTokens: 0 });
    expectRule('// @options: {"timeout_ms": 3600001}\nx', "options-value");
    expectRule('// @options: {"max_output_tokens": 1000001}\nx', "options-value");
  });

  it("treats lookalikes of the options line as code", () => {
    for (const text of ["//@options: {}\nx", "// @option: {}\nx", "// @optionsX", 'x; // @options: {"a": 1}']) {
      expect(parseCodemodeSource(text)).toEqual({ code: text, options: {} });
    }
  });

  it("rejects empty and whitespace-only scripts", () => {
    expect(expectRule("", "empty").message).toMatch(/empty/);
    expect(expectRule("  \n\t\r\n", "empty").message).toMatch(/whitespace/);
    expectRule("\u00a0\u3000\ufeff\u2028", "empty");
  });

  it("rejects an options line that is not JSON, and says so", () => {
    for (const json of ["{", "{timeout_ms: 5}", '{"timeout_ms": 5,}', '{"timeout_ms": 5} // why', "{'a': 1}"]) {
      const error = expectRule(`// @options: ${json}\nx`, "options-json");
      expect(error.message).toMatch(/^@options must be valid JSON with supported fields/);
      expect(error.line).toBe(1);
    }
  });

  it("rejects options that are not an object", () => {
    for (const [json, got] of [
      ["", "nothing"],
      ["[]", "an array"],
      ["5", "number 5"],
      ["null", "null"],
      ['"x"', 'the string "x"'],
      ["true", "boolean true"],
    ]) {
      const error = expectRule(`// @options: ${json}\nx`, "options-object");
      expect(error.message).toMatch(/^@options must be a JSON object with supported fields/);
      expect(error.message).toContain(`got ${got}`);
    }
  });

  it("rejects unknown fields and names every one of them", () => {
    const one = expectRule('// @options: {"timeout": 5}\nx', "options-unknown-field");
    expect(one.message).toMatch(/^@options only supports `max_output_tokens` and `timeout_ms`; got `timeout`\./);
    const two = expectRule('// @options: {"timeout_ms": 5, "model": "x", "__proto__": 1}\nx', "options-unknown-field");
    expect(two.message).toContain("got `model`, `__proto__`.");
  });

  it("rejects wrong types and values and names the field", () => {
    const cases: [string, string, string][] = [
      ['{"timeout_ms": "5"}', "timeout_ms", 'got the string "5"'],
      ['{"timeout_ms": 1.5}', "timeout_ms", "got 1.5"],
      ['{"timeout_ms": 0}', "timeout_ms", "got 0"],
      ['{"max_output_tokens": -1}', "max_output_tokens", "got -1"],
      ['{"timeout_ms": -1}', "timeout_ms", "got -1"],
      ['{"timeout_ms": null}', "timeout_ms", "got null"],
      ['{"max_output_tokens": true}', "max_output_tokens", "got boolean true"],
      ['{"max_output_tokens": [1]}', "max_output_tokens", "got an array"],
      ['{"max_output_tokens": 1e400}', "max_output_tokens", "got Infinity"],
    ];
    for (const [json, field, got] of cases) {
      const error = expectRule(`// @options: ${json}\nx`, "options-value");
      expect(error.message).toMatch(
        new RegExp(`^@options field \`${field}\` must be a (non-negative safe|positive) integer`),
      );
      expect(error.message).toContain(got);
    }
    const both = expectRule('// @options: {"max_output_tokens": 0.5, "timeout_ms": "1"}\nx', "options-value");
    expect(both.message).toContain("`max_output_tokens`");
    expect(both.message).toContain("`timeout_ms`");
  });

  it("takes any JSON spelling of an allowed integer", () => {
    expect(parseCodemodeSource('// @options: {"timeout_ms": 3e4, "max_output_tokens": 20.0}\nx').options).toEqual({
      timeoutMs: 30000,
      maxOutputTokens: 20,
    });
  });

  it("rejects an options line with no code after it", () => {
    for (const text of ['// @options: {"timeout_ms": 5}', "// @options: {}\n", "// @options: {}\n  \n\t\n"]) {
      const error = expectRule(text, "options-without-code");
      expect(error.message).toMatch(/no code after it/);
    }
    // A comment is code as far as this rule goes.
    expect(parseCodemodeSource("// @options: {}\n// just a comment").code).toBe("\n// just a comment");
  });

  it("rejects an options line on any line but the first, with its line number", () => {
    const cases: [string, number][] = [
      ["x\n// @options: {}", 2],
      ['// @options: {"timeout_ms": 5}\nx\n\n  // @options: {"timeout_ms": 6}', 4],
      ["\n// @options: {}\nx", 2],
      ["x\n\u00a0\t// @options: anything", 2],
      ["x\r\ny\r\n// @options:\r\n", 3],
    ];
    for (const [text, line] of cases) {
      const error = expectRule(text, "options-not-first-line");
      expect(error.line).toBe(line);
      expect(error.message).toContain(`Line ${line} starts with // @options:`);
    }
  });

  it("throws CodemodeSourceError, an Error with a name and a rule", () => {
    const error = expectRule("", "empty");
    expect(error).toBeInstanceOf(Error);
    expect(error.name).toBe("CodemodeSourceError");
    expect(String(error)).toMatch(/^CodemodeSourceError: /);
  });

  it("throws TypeError for an argument that is not a string", () => {
    for (const value of [undefined, null, 5, {}, ["x"], Buffer.from("x")]) {
      expect(() => parseCodemodeSource(value as unknown as string)).toThrow(TypeError);
    }
  });
});

/** Asserts that stripping kept every line and column: same length, same line ends, only types turned to spaces. */
function expectSamePositions(input: string, output: string): void {
  expect(output).toHaveLength(input.length);
  expect(output.split("\n").map((line) => line.length)).toEqual(input.split("\n").map((line) => line.length));
  for (let index = 0; index < input.length; index++) {
    if (output[index] !== input[index]) {
      expect(output[index], `at ${index} of ${JSON.stringify(input)}`).toBe(" ");
      expect(input[index]).not.toMatch(/[\r\n]/);
    }
  }
}

const TYPESCRIPT_SAMPLES = [
  "const a: number = 1;\nlet b: Array<string> = [];\nreturn a;",
  "function f<T extends object>(x: T, y?: number): T { return x; }\nreturn f({});",
  "const g = async (x: unknown): Promise<void> => {};\nawait g(1);",
  "interface I {\n  a: string;\n  b: number;\n}\nconst i: I = { a: '', b: 1 };",
  'type U =\n  | "a"\n  | "b";\nlet u: U = "a";',
  'class C<T> implements I {\n  private a: string = "";\n  declare b: number;\n  public static c?: T;\n  protected m(): void {}\n}',
  "abstract class D {\n  abstract m(): void;\n  n!: number;\n}",
  "const h = x as unknown as string;\nconst k = obj!.prop!;\nconst s = {} satisfies Record<string, number>;",
  "function isString(v: unknown): v is string { return typeof v === 'string'; }\nfunction check(v: unknown): asserts v {}",
  "let t: [a: string, b?: number] = ['x'];\ndeclare const z: number;\ndeclare function df(): void;",
  'const u = f<string>("x");\nconst e = "😀 日本 é"; let v: string = e;\n\tconst w: number = 1; // tab',
  "function o(x: string): string;\nfunction o(x: number): number;\nfunction o(x: any) { return x; }",
  "declare enum E { A }\ndeclare namespace N { const n: number }\ntype T = typeof import('x');",
  "for (const [k, v] of Object.entries(obj) as [string, number][]) {\n  total += v as number;\n}\nreturn total;",
  "const m = new Map<string, { id: number }[]>();\nconst fn = function <T,>(this: Window, x: T): T { return x; };",
  "let x = 1 as const;\nlet y = ['a'] as const;",
];

describe("stripTypeScript", () => {
  it("erases types and keeps the rest character for character", () => {
    expect(stripTypeScript("const a: number = await f<string>(x as any);\nreturn a!;")).toBe(
      "const a         = await f        (x       );\nreturn a ;",
    );
    expect(stripTypeScript("interface I {\n  a: string;\n}\nreturn 1;")).toBe(
      "             \n            \n \nreturn 1;",
    );
  });

  it("keeps every line and column of typical TypeScript", () => {
    for (const sample of TYPESCRIPT_SAMPLES) {
      const output = stripTypeScript(sample);
      expectSamePositions(sample, output);
      expect(output).not.toBe(sample);
      // What is left is JavaScript: it compiles as the body of an async function.
      expect(() => new AsyncFunction(output)).not.toThrow();
    }
  });

  it("returns plain JavaScript unchanged, top-level await and return included", () => {
    const samples = [
      "return 1;",
      "const r = await fetchThing();\nreturn r.map((x) => x * 2);",
      'const s = "😀 日本 é\\u0301";\n\tif (s) {\n\t\treturn s; // ok\n\t}\r\n',
      // biome-ignore lint/suspicious/noTemplateCurlyInString: the script under test has a template literal
      "label: for (;;) { break label; }\nconst re = /a\\/b/g;\nconst t = `x ${1 + 2} y`;",
      "class A { #p = 1; static { } get p() { return this.#p; } }\nreturn new A().p;",
      "// @options is only special on the first line, and this is a comment",
    ];
    for (const sample of samples) expect(stripTypeScript(sample)).toBe(sample);
  });

  it("gives JavaScript that runs as the body of an async function", async () => {
    const code = stripTypeScript(
      "const xs: number[] = [1, 2, 3];\nconst n = await Promise.resolve<number>(10);\nreturn xs.map((x: number): number => x * n);",
    );
    await expect(new AsyncFunction(code)()).resolves.toEqual([10, 20, 30]);
  });

  it("makes stack traces point at the script's own lines and columns", async () => {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the script under test has a template literal
    const throwing = "  const n: number = p.x; throw new Error(`boom ${n as number}`);";
    const script = ["type Point = { x: number };", "const p: Point = { x: 1 };", throwing].join("\n");
    const wrapped = new vm.Script(`(async function(){${stripTypeScript(script)}\n})`, { filename: "script.ts" });
    const run = wrapped.runInThisContext() as () => Promise<unknown>;
    const error = (await run().then(
      () => undefined,
      (reason: unknown) => reason,
    )) as Error;
    expect(error.message).toBe("boom 1");
    const frame = /script\.ts:(\d+):(\d+)/.exec(error.stack ?? "");
    expect(frame?.slice(1)).toEqual(["3", String(throwing.indexOf("new Error") + 1)]);
  });

  it("moves a `)` only to keep an arrow function legal when its return type starts a new line", () => {
    const input = "const f = (x)\n: number => x;\nreturn f(2);";
    const output = stripTypeScript(input);
    expect(output.split("\n")).toHaveLength(3);
    expect(output).toHaveLength(input.length);
    expect(output.split("\n")[2]).toBe("return f(2);");
    expect(() => new AsyncFunction(output)).not.toThrow();
  });

  it("reports syntax errors with the line and column in the script", () => {
    const cases: [string, number, number][] = [
      ["let x: = 1;", 1, 8],
      ["const a = 1;\nlet b: number = ;", 2, 17],
      ["const s = 'héllo😀'; let x: = 1;", 1, 29],
      ["ok();\n\tconst t = '日本'; let x: = 1;", 2, 25],
      ["const e = 'e\u0301'; let x: = 1;", 1, 24],
      ["const a = 1;\r\nlet b: = 2;\r\n", 2, 8],
      ["const x = “hi”;", 1, 11],
    ];
    for (const [script, line, column] of cases) {
      const error = sourceError(() => stripTypeScript(script));
      expect(error.rule, script).toBe("typescript");
      expect([error.line, error.column], script).toEqual([line, column]);
      expect(error.message).toContain(`TypeScript syntax error at line ${line}, column ${column}: `);
      expect(error.message).toContain(`${line} | ${script.split("\n")[line - 1]?.replace(/\r$/, "")}`);
    }
  });

  it("reports code that ends too early at the end of the script, or where the open construct starts", () => {
    const cases: [string, number, number][] = [
      ["if (x) {\n  foo(", 2, 7],
      ["ok();\n/* never closed\n", 3, 1],
      ["const a = `never closed", 1, 11],
    ];
    for (const [script, line, column] of cases) {
      const error = sourceError(() => stripTypeScript(script));
      expect(error.rule, script).toBe("typescript");
      expect([error.line, error.column], script).toEqual([line, column]);
    }
  });

  it("says that a script is a function body when it has import or export statements", () => {
    for (const script of [
      'import fs from "node:fs";',
      'import fs = require("fs");',
      "export const a = 1;",
      "export = 1;",
    ]) {
      const error = sourceError(() => stripTypeScript(script));
      expect(error.rule, script).toBe("typescript");
      expect(error.message).toContain("TypeScript syntax error at line 1, column 1: ");
      expect(error.message).toContain("The script is the body of an async function");
    }
  });

  it("explains TypeScript that needs code generation rather than erasure", () => {
    const cases: [string, RegExp, number, number][] = [
      ["enum Color { Red }", /enums are not supported/, 1, 1],
      ["ok();\n  const enum E { A }", /enums are not supported/, 2, 3],
      ["namespace N { export const a = 1; }", /namespaces are not supported/, 1, 1],
      ["module M { export const a = 1; }", /namespaces are not supported/, 1, 1],
      ["class A {\n  constructor(private x: number) {}\n}", /parameter properties .* are not supported/, 2, 23],
      ["let y = <any>x;", /`<T>value` type assertions are not supported. Write `value as T`/, 1, 9],
    ];
    for (const [script, message, line, column] of cases) {
      const error = sourceError(() => stripTypeScript(script));
      expect(error.rule, script).toBe("typescript-unsupported");
      expect(error.message, script).toMatch(message);
      expect(error.message).toContain(`Unsupported TypeScript at line ${line}, column ${column}: `);
      expect([error.line, error.column], script).toEqual([line, column]);
    }
  });

  it("throws TypeError for an argument that is not a string", () => {
    for (const value of [undefined, null, 5, {}]) {
      expect(() => stripTypeScript(value as unknown as string)).toThrow(TypeError);
    }
  });

  it("works on what parseCodemodeSource returns, keeping line numbers", () => {
    const { code, options } = parseCodemodeSource(
      '// @options: {"timeout_ms": 1000}\nconst a: number = 1;\nlet b: = 2;',
    );
    expect(options).toEqual({ timeoutMs: 1000 });
    expect(sourceError(() => stripTypeScript(code)).line).toBe(3);
    expect(stripTypeScript(code.replace("let b: = 2;", "return a;"))).toBe("\nconst a         = 1;\nreturn a;");
  });
});
