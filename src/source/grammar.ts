/**
 * A Lark grammar of the scripts `parseCodemodeSource` accepts, for model providers whose tools can take
 * grammar-constrained input (a "custom tool" with a Lark grammar). It is regular on purpose (no recursion, one
 * terminal for the whole script), so that it means the same to Lark's LALR and Earley parsers and to
 * regular-expression based engines, and its regular expressions use only syntax that Python, Rust and JavaScript
 * read alike (character classes with `\uXXXX` escapes, `{m,n}`, `(?:...)`, no lookaround, no `\s`).
 *
 * It matches `parseCodemodeSource` line for line, with one deliberate difference: the grammar only produces the
 * canonical JSON spelling of options (plain integers such as `30000`, field names without escapes, each field at
 * most once), while `parseCodemodeSource` reads the line with `JSON.parse` and so also takes `3e4`, `30000.0`,
 * `"timeout\u005fms"` and repeated fields. Everything the grammar produces is accepted.
 */
export const CODEMODE_SOURCE_GRAMMAR: string = String.raw`// An airlock code-mode script: what parseCodemodeSource (airlock/source) accepts.
// Lines end at "\n". The first line may set options: "// @options:" after optional whitespace, then a JSON
// object with only "max_output_tokens" (0 to 1000000) and "timeout_ms" (1 to 3600000), each a plain integer.
// Then comes the code: at least one line with a character that is not whitespace, and no line that starts
// with "// @options:" after optional whitespace.
start: SOURCE

SOURCE: (OPTIONS_LINE "\n")? (BLANK_LINE "\n")* CODE_LINE ("\n" LINE)*

OPTIONS_LINE: INLINE_WS* "// @options:" JSON_WS OPTIONS JSON_WS
OPTIONS: "{" JSON_WS "}"
       | "{" JSON_WS MAX_OUTPUT_TOKENS JSON_WS "}"
       | "{" JSON_WS TIMEOUT_MS JSON_WS "}"
       | "{" JSON_WS MAX_OUTPUT_TOKENS JSON_WS "," JSON_WS TIMEOUT_MS JSON_WS "}"
       | "{" JSON_WS TIMEOUT_MS JSON_WS "," JSON_WS MAX_OUTPUT_TOKENS JSON_WS "}"
MAX_OUTPUT_TOKENS: "\"max_output_tokens\"" JSON_WS ":" JSON_WS /(?:0|[1-9][0-9]{0,5}|1000000)/
TIMEOUT_MS: "\"timeout_ms\"" JSON_WS ":" JSON_WS /(?:[1-9][0-9]{0,5}|[12][0-9]{6}|3[0-5][0-9]{5}|3600000)/
JSON_WS: /[ \t\r]*/

// A line of code is whitespace and then NOT_OPTIONS: text that starts with a character that is not
// whitespace and does not start with "// @options:" (each alternative follows a longer part of that prefix
// and then a character that breaks it).
BLANK_LINE: INLINE_WS*
CODE_LINE: INLINE_WS* NOT_OPTIONS
LINE: INLINE_WS* NOT_OPTIONS?
NOT_OPTIONS: /[^\t\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff\n\/]/ REST
           | "/" (/[^\/\n]/ REST)?
           | "//" (/[^ \n]/ REST)?
           | "// " (/[^@\n]/ REST)?
           | "// @" (/[^o\n]/ REST)?
           | "// @o" (/[^p\n]/ REST)?
           | "// @op" (/[^t\n]/ REST)?
           | "// @opt" (/[^i\n]/ REST)?
           | "// @opti" (/[^o\n]/ REST)?
           | "// @optio" (/[^n\n]/ REST)?
           | "// @option" (/[^s\n]/ REST)?
           | "// @options" (/[^:\n]/ REST)?
REST: /[^\n]*/
// JavaScript's whitespace other than "\n" (what String.prototype.trim removes).
INLINE_WS: /[\t\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]/
`;
