/**
 * pi-codemode's source-format test cases (packages/codemode/test/source.test.ts of earendil-works/pi), ported: the
 * same inputs give the same code and options, and the same errors (by class and by the start of the message) from
 * Airlock's parseCodemodeSource and from pi-codemode 1.6.0's.
 */
import * as pi from "@earendil-works/pi-codemode";
import * as airlock from "airlock-codemode/source";
import { describe, expect, it } from "vitest";

const parsers = [
  { name: "Airlock", parse: airlock.parseCodemodeSource, SourceError: airlock.CodemodeSourceError },
  { name: "pi-codemode 1.6.0", parse: pi.parseCodemodeSource, SourceError: pi.CodemodeSourceError },
] as const;

describe.each(parsers)("$name: parseCodemodeSource", ({ parse, SourceError }) => {
  it("returns code without an options line as it is", () => {
    expect(parse("text('hi')")).toEqual({ code: "text('hi')", options: {} });
    expect(parse("// just a comment\nreturn 1")).toEqual({ code: "// just a comment\nreturn 1", options: {} });
  });

  it("reads the options line as maxOutputTokens and timeoutMs, and keeps the line numbers", () => {
    expect(parse('// @options: {"timeout_ms": 10}\nconst a = 1;\ntext(a)')).toEqual({
      code: "\nconst a = 1;\ntext(a)",
      options: { timeoutMs: 10 },
    });
    expect(parse('  // @options:{"max_output_tokens":0,"timeout_ms":1500}\r\ntext(1)').options).toEqual({
      maxOutputTokens: 0,
      timeoutMs: 1500,
    });
    expect(parse("// @options: {}\ntext(1)")).toEqual({ code: "\ntext(1)", options: {} });
  });

  it("takes only the first line as an options line", () => {
    expect(parse("// @optionsx {}\ntext(1)").options).toEqual({});
  });

  it("refuses an options line on a later line, which would otherwise go unnoticed", () => {
    expect(() => parse('text(1)\n// @options: {"timeout_ms": 1}')).toThrow(SourceError);
    expect(() => parse('text(1)\n// @options: {"timeout_ms": 1}')).toThrow(/line 2/i);
  });

  it("refuses empty input and options it cannot read, saying why", () => {
    const cases: [string, string | RegExp][] = [
      ["", /Expected JavaScript source text \(non-empty\)/],
      ["  \n", /Expected JavaScript source text \(non-empty\)/],
      ["// @options:\ntext(1)", /@options must be a JSON object with supported fields/],
      ["// @options: {timeout_ms: 1}\ntext(1)", /@options must be valid JSON with supported fields/],
      ["// @options: [1]\ntext(1)", /@options must be a JSON object with supported fields/],
      [
        '// @options: {"yield": 1}\ntext(1)',
        "@options only supports `max_output_tokens` and `timeout_ms`; got `yield`",
      ],
      [
        '// @options: {"max_output_tokens": 1.5}\ntext(1)',
        "@options field `max_output_tokens` must be a non-negative safe integer",
      ],
      ['// @options: {"timeout_ms": 0}\ntext(1)', /@options field `timeout_ms` must be a positive integer/],
      ['// @options: {"timeout_ms": 1}', "The @options line must be followed by JavaScript source on subsequent lines"],
      [
        '// @options: {"timeout_ms": 1}\n  \n',
        "The @options line must be followed by JavaScript source on subsequent lines",
      ],
    ];
    for (const [input, message] of cases) {
      expect(() => parse(input), input).toThrow(SourceError);
      expect(() => parse(input), input).toThrow(message);
    }
  });
});
