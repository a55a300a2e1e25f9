/**
 * Checks that CODEMODE_SOURCE_GRAMMAR (a Lark grammar) accepts exactly the scripts parseCodemodeSource accepts.
 *
 * Lark itself is a Python library and no maintained npm package reads Lark grammars, so this file carries a small
 * translator, `larkToRegExp`, for exactly the part of Lark the grammar uses: definitions `name: expansion` (rules
 * and terminals alike) with `|` alternatives that may continue on following lines, "strings" with \" \\ \n \t \r
 * escapes, /regular expressions/ without flags, references to other definitions, ( ) groups, postfix ? * +, and
 * `//` comments. Anything else (%import, %ignore, [optional], ~ repetition, "a".."z" ranges, priorities, templates,
 * flags, rule modifiers) throws, and so does recursion: the grammar is regular, so inlining every reference gives
 * one JavaScript RegExp whose language is the grammar's language. The regular expressions in the grammar keep to
 * syntax that JavaScript (with the `u` flag), Python and Rust read alike, so their bodies are copied as they are.
 * The same samples were also checked against Python's lark 1.1.5 (parser="lalr" and "earley") by hand.
 */
import { CODEMODE_SOURCE_GRAMMAR, parseCodemodeSource } from "airlock-codemode/source";
import { describe, expect, it } from "vitest";

type Token =
  | { kind: "name" | "regexp"; text: string }
  | { kind: "string"; text: string }
  | { kind: ":" | "|" | "(" | ")" | "?" | "*" | "+" | "newline" };

const STRING_ESCAPES: Record<string, string> = { '"': '"', "\\": "\\", n: "\n", t: "\t", r: "\r" };

function tokenize(grammar: string): Token[] {
  const tokens: Token[] = [];
  let at = 0;
  const fail = (what: string): never => {
    const line = grammar.slice(0, at).split("\n").length;
    throw new Error(`unsupported Lark syntax on line ${line}: ${what}`);
  };
  while (at < grammar.length) {
    const char = grammar[at] as string;
    if (char === " " || char === "\t" || char === "\r") {
      at++;
    } else if (char === "\n") {
      tokens.push({ kind: "newline" });
      at++;
    } else if (grammar.startsWith("//", at)) {
      const end = grammar.indexOf("\n", at);
      at = end === -1 ? grammar.length : end;
    } else if (char === '"') {
      let text = "";
      at++;
      while (grammar[at] !== '"') {
        if (at >= grammar.length || grammar[at] === "\n") fail("unterminated string");
        if (grammar[at] === "\\") {
          const escaped = STRING_ESCAPES[grammar[at + 1] as string];
          if (escaped === undefined) fail(`string escape \\${grammar[at + 1]}`);
          text += escaped;
          at += 2;
        } else {
          text += grammar[at];
          at++;
        }
      }
      at++;
      if (/[a-z]/i.test(grammar[at] ?? "")) fail("string flags");
      if (grammar.startsWith("..", at)) fail("character ranges");
      tokens.push({ kind: "string", text });
    } else if (char === "/") {
      let end = at + 1;
      while (grammar[end] !== "/") {
        if (end >= grammar.length || grammar[end] === "\n") fail("unterminated regular expression");
        end += grammar[end] === "\\" ? 2 : 1;
      }
      if (/[a-z]/i.test(grammar[end + 1] ?? "")) fail("regular expression flags");
      tokens.push({ kind: "regexp", text: grammar.slice(at + 1, end) });
      at = end + 1;
    } else if (/[A-Za-z_]/.test(char)) {
      const name = /^[A-Za-z_][A-Za-z0-9_]*/.exec(grammar.slice(at))?.[0] as string;
      tokens.push({ kind: "name", text: name });
      at += name.length;
    } else if (":|()?*+".includes(char)) {
      tokens.push({ kind: char as ":" });
      at++;
    } else {
      fail(JSON.stringify(char));
    }
  }
  return tokens;
}

/** Translates a regular Lark grammar (the subset described above) into an anchored RegExp for its `start` rule. */
function larkToRegExp(grammar: string): RegExp {
  const tokens = tokenize(grammar);
  const definitions = new Map<string, Token[]>();
  let at = 0;
  while (at < tokens.length) {
    const token = tokens[at] as Token;
    if (token.kind === "newline") {
      at++;
      continue;
    }
    if (token.kind !== "name" || tokens[at + 1]?.kind !== ":") throw new Error("expected `name:` at a definition");
    if (definitions.has(token.text)) throw new Error(`${token.text} is defined twice`);
    at += 2;
    const body: Token[] = [];
    // A definition ends at a newline that is not followed (after blank lines) by a `|` continuation.
    while (at < tokens.length) {
      const current = tokens[at] as Token;
      if (current.kind === "newline") {
        let next = at;
        while (tokens[next]?.kind === "newline") next++;
        if (tokens[next]?.kind !== "|") break;
        at = next;
        continue;
      }
      body.push(current);
      at++;
    }
    definitions.set(token.text, body);
  }

  const compiled = new Map<string, string>();
  const visiting = new Set<string>();
  const compileName = (name: string): string => {
    const done = compiled.get(name);
    if (done !== undefined) return done;
    const body = definitions.get(name);
    if (body === undefined) throw new Error(`${name} is not defined`);
    if (visiting.has(name)) throw new Error(`${name} is recursive: the grammar is not regular`);
    visiting.add(name);
    const source = compileBody(body);
    visiting.delete(name);
    compiled.set(name, source);
    return source;
  };

  const compileBody = (body: Token[]): string => {
    let at = 0;
    const alternatives = (): string => {
      const options = [sequence()];
      while (body[at]?.kind === "|") {
        at++;
        options.push(sequence());
      }
      return `(?:${options.join("|")})`;
    };
    const sequence = (): string => {
      let source = "";
      let items = 0;
      while (at < body.length && body[at]?.kind !== "|" && body[at]?.kind !== ")") {
        source += item();
        items++;
      }
      if (items === 0) throw new Error("empty alternative");
      return source;
    };
    const item = (): string => {
      const token = body[at++] as Token;
      let source: string;
      if (token.kind === "string") source = `(?:${token.text.replace(/[\\^$.*+?()[\]{}|/]/g, "\\$&")})`;
      else if (token.kind === "regexp") source = `(?:${token.text})`;
      else if (token.kind === "name") source = `(?:${compileName(token.text)})`;
      else if (token.kind === "(") {
        source = alternatives();
        if (body[at++]?.kind !== ")") throw new Error("missing )");
      } else throw new Error(`unexpected ${token.kind}`);
      const suffix = body[at]?.kind;
      if (suffix === "?" || suffix === "*" || suffix === "+") {
        at++;
        source += suffix;
      }
      return source;
    };
    const source = alternatives();
    if (at !== body.length) throw new Error(`unexpected ${body[at]?.kind}`);
    return source;
  };

  return new RegExp(`^${compileName("start")}$`, "u");
}

describe("larkToRegExp (the test's translator)", () => {
  it("translates strings, regular expressions, references, groups, alternatives and ? * +", () => {
    const grammar = [
      "// a comment",
      'start: "a" B? (C | "d")* E+',
      'B: /[0-9]/ "\\"" // digit and a quote',
      'C: "x"',
      '  | "y\\n"',
      'E: "." | "-"',
    ].join("\n");
    const regexp = larkToRegExp(grammar);
    for (const text of ["a.", 'a1"x.', "axy\nd...", "ad.", "a-."]) expect(regexp.test(text), text).toBe(true);
    for (const text of ["a", "a1.", "b.", "ay.", "a.x", 'a1"1".']) expect(regexp.test(text), text).toBe(false);
  });

  it("refuses Lark it does not translate, and recursion", () => {
    const unsupported = [
      'start: "a"i',
      'start: "a".."z"',
      "start: /a/i",
      'start: ["a"]',
      'start: "a"~3',
      "%ignore WS\nstart: A",
      'start: a\na: "(" a ")" | "x"',
      "start: B",
      'start: "a"\nstart: "b"',
      'start: "a" |',
    ];
    for (const grammar of unsupported) expect(() => larkToRegExp(grammar), grammar).toThrow();
  });
});

const OPTIONS = '// @options: {"max_output_tokens": 2000, "timeout_ms": 30000}';

/** Scripts both should accept. */
const ACCEPTED = [
  "x",
  "return 1;",
  "\n\nx\n",
  "  \t x  ",
  `${OPTIONS}\nreturn 1;`,
  '// @options: {"timeout_ms": 30000, "max_output_tokens": 2000}\nx',
  '// @options: {"timeout_ms": 30000}\nx',
  '// @options: {"max_output_tokens": 1}\nx',
  '// @options: {"max_output_tokens": 0}\nx',
  "// @options: {}\nx",
  "// @options:{}\nx",
  '  \t// @options:{"timeout_ms":1}\n\n  x  \n\n',
  '// @options: { "max_output_tokens" : 1000000 } \r\nx\r\n',
  '// @options: {"timeout_ms": 3600000}\nx',
  '// @options: {"timeout_ms": 2999999}\nx',
  '// @options: {"timeout_ms": 999999}\nx',
  "\ufeff// @options: {}\nx",
  "//@options: {}\nx",
  "// @option: {}",
  "// @optionsX",
  "x\n// @options",
  "x\n/\n//\n// \n// @\n// @o\n// @opti",
  'x; // @options: {"a": 1}',
  "/* // @options: */ x",
  "x\n  //  @options: {}",
  "\u00a0x",
  "é",
  "😀",
  "x\r",
  "// @options: {}\n// only a comment",
  "// @options: {}\n\n\n  foo()\n\n",
];

/** Scripts both should reject. */
const REJECTED = [
  "",
  "   ",
  "\n\n\t\r\n",
  "\u00a0\u3000\ufeff",
  "\u2028\u2029",
  "// @options: {\n}\nx",
  "// @options: \nx",
  "// @options:",
  "// @options: []\nx",
  "// @options: 5\nx",
  "// @options: null\nx",
  '// @options: "x"\nx',
  '// @options: {"timeout": 5}\nx',
  '// @options: {"timeout_ms": "5"}\nx',
  '// @options: {"timeout_ms": 1.5}\nx',
  '// @options: {"timeout_ms": 0}\nx',
  '// @options: {"timeout_ms": -1}\nx',
  '// @options: {"timeout_ms": 01}\nx',
  '// @options: {"timeout_ms": 3600001}\nx',
  '// @options: {"timeout_ms": 4000000}\nx',
  '// @options: {"max_output_tokens": 1000001}\nx',
  '// @options: {"max_output_tokens": true}\nx',
  '// @options: {"max_output_tokens": 00}\nx',
  '// @options: {"max_output_tokens": -1}\nx',
  '// @options: {"timeout_ms": 5} // note\nx',
  '// @options: {"timeout_ms": 5,}\nx',
  "// @options: {\u00a0}\nx",
  `${OPTIONS}`,
  `${OPTIONS}\n`,
  `${OPTIONS}\n  \n\t\n`,
  "x\n// @options: {}",
  "x\n  // @options:",
  "// @options: {}\nx\n// @options: {}",
  "\n// @options: {}\nx",
  "x\n\u00a0// @options: {}",
  "x\n\t// @options: trailing",
  "x\r\n// @options:\r\n",
  "\ufeff// @options: {bad}\nx",
];

/** Accepted by parseCodemodeSource (it reads JSON values) but not produced by the grammar (canonical JSON only). */
const PARSER_ONLY = [
  '// @options: {"timeout_ms": 3e4}\nx',
  '// @options: {"timeout_ms": 30000.0}\nx',
  '// @options: {"timeout_ms": 1, "timeout_ms": 2}\nx',
  '// @options: {"timeout\\u005fms": 5}\nx',
];

function parserAccepts(text: string): boolean {
  try {
    parseCodemodeSource(text);
    return true;
  } catch {
    return false;
  }
}

/** Deterministic pseudo-random numbers (a linear congruential generator), so failures reproduce. */
function random(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return state / 2 ** 31;
  };
}

/** Lines that sit near the rules' edges, combined at random into scripts of one to four lines. */
const LINE_POOL = [
  "",
  " ",
  "\t",
  "\u00a0",
  "\r",
  "x",
  "  foo()",
  "x\r",
  "😀",
  "/",
  "//",
  "// @",
  "// @options",
  "// @options:",
  "// @options: {}",
  ' // @options: {"max_output_tokens": 10}',
  '// @options: {"timeout_ms": 5, "max_output_tokens": 6}',
  '// @options: {"timeout_ms": 0}',
  '// @options: {"timeout_ms": 5, "x": 1}',
  "// @options: []",
  "//@options: {}",
  "x // @options: {}",
];

function randomScripts(count: number): string[] {
  const next = random(20_260_901);
  const scripts: string[] = [];
  for (let index = 0; index < count; index++) {
    const lines = 1 + Math.floor(next() * 4);
    const picked: string[] = [];
    for (let line = 0; line < lines; line++) picked.push(LINE_POOL[Math.floor(next() * LINE_POOL.length)] as string);
    scripts.push(picked.join("\n"));
  }
  return scripts;
}

describe("CODEMODE_SOURCE_GRAMMAR", () => {
  const grammar = larkToRegExp(CODEMODE_SOURCE_GRAMMAR);

  it("is a regular Lark grammar with a start rule", () => {
    expect(CODEMODE_SOURCE_GRAMMAR).toMatch(/^start: /m);
    expect(grammar).toBeInstanceOf(RegExp);
  });

  it("agrees with parseCodemodeSource on scripts it should accept", () => {
    expect(ACCEPTED.length).toBeGreaterThanOrEqual(20);
    for (const text of ACCEPTED) {
      expect(parserAccepts(text), `parser on ${JSON.stringify(text)}`).toBe(true);
      expect(grammar.test(text), `grammar on ${JSON.stringify(text)}`).toBe(true);
    }
  });

  it("agrees with parseCodemodeSource on scripts it should reject", () => {
    expect(REJECTED.length).toBeGreaterThanOrEqual(20);
    for (const text of REJECTED) {
      expect(parserAccepts(text), `parser on ${JSON.stringify(text)}`).toBe(false);
      expect(grammar.test(text), `grammar on ${JSON.stringify(text)}`).toBe(false);
    }
  });

  it("agrees with parseCodemodeSource on 1000 random scripts built from edge-case lines", () => {
    const scripts = randomScripts(1000);
    let accepted = 0;
    for (const text of scripts) {
      const parser = parserAccepts(text);
      expect(grammar.test(text), `grammar and parser differ on ${JSON.stringify(text)}`).toBe(parser);
      if (parser) accepted++;
    }
    // Both outcomes are well represented, so agreement is not trivial.
    expect(accepted).toBeGreaterThan(100);
    expect(scripts.length - accepted).toBeGreaterThan(100);
  });

  it("produces only the canonical JSON spelling, a subset of what parseCodemodeSource reads", () => {
    for (const text of PARSER_ONLY) {
      expect(parserAccepts(text), text).toBe(true);
      expect(grammar.test(text), text).toBe(false);
    }
  });
});
