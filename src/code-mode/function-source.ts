/**
 * Whether a program's source is one function expression, the shape the VM calls with `(input, tools)`:
 * `async (input, tools) => ...`, `input => ...`, `async function (input, tools) { ... }`, or one of those in
 * parentheses. Told at definition by V8's parser alone: the source is compiled here, never run.
 */
import { Script } from "node:vm";

/** `) =>` pairs tried as the end of an arrow's parameter list; a list holds at most this many arrows of its own. */
const MAX_PARAMETER_ARROWS = 32;
/** Parentheses around the whole function that are looked through. */
const MAX_WRAPPING_PARENTHESES = 16;

/** Whitespace and comments between two tokens. */
const GAP = String.raw`(?:\s|/\*[\s\S]*?\*/|//[^\n]*(?:\n|$))*`;
const IDENTIFIER = String.raw`[\p{ID_Start}$_][\p{ID_Continue}$\u200c\u200d]*`;
const LEADING_GAP = new RegExp(`^${GAP}`);
const ONLY_GAP = new RegExp(`^${GAP}$`);
const ONE_PARAMETER_ARROW = new RegExp(`^${IDENTIFIER}${GAP}=>`, "u");
const ASYNC = new RegExp(`^async(?=${GAP}(?:function\\b|\\(|${IDENTIFIER}${GAP}=>))`, "u");
const FUNCTION_HEAD = new RegExp(`^function(?![\\p{ID_Continue}$])${GAP}(\\*${GAP})?(${IDENTIFIER})?`, "u");
/** Sticky: tried at `lastIndex`, so that no copy of the rest of the source is made per `)`. */
const ARROW_AFTER = new RegExp(`${GAP}=>`, "y");

/** Why `source` is not one function expression (Airlock's words, never the source's), or undefined when it is. */
export function functionSourceProblem(source: string): string | undefined {
  // A computed key holds one expression and no top-level comma; statements and syntax errors fail here.
  if (!parses(`({ [${source}\n]: 0 })`)) return "it does not parse as one JavaScript expression";
  let code = source.replace(LEADING_GAP, "");
  for (let depth = 0; depth <= MAX_WRAPPING_PARENTHESES; depth++) {
    if (isFunction(code)) return undefined;
    // `( ... )` around the whole: the inside is one expression too, and then these two parentheses match.
    const close = code.lastIndexOf(")");
    if (!code.startsWith("(") || close === -1 || !ONLY_GAP.test(code.slice(close + 1))) break;
    const inner = code.slice(1, close).replace(LEADING_GAP, "");
    if (!parses(`({ [${inner}\n]: 0 })`)) break;
    code = inner;
  }
  return "it is an expression, but not a function";
}

/** `code` is one expression: does it start as a function whose text runs to its end? */
function isFunction(code: string): boolean {
  // An identifier and `=>` can only begin an arrow, and an arrow takes the rest of the expression as its body.
  if (ONE_PARAMETER_ARROW.test(code)) return true;
  const asyncPrefix = ASYNC.exec(code)?.[0] ?? "";
  const rest = code.slice(asyncPrefix.length).replace(LEADING_GAP, "");
  if (rest.startsWith("function")) return isWholeFunctionExpression(asyncPrefix, rest);
  if (asyncPrefix !== "" && ONE_PARAMETER_ARROW.test(rest)) return true;
  return rest.startsWith("(") && startsWithArrowParameters(asyncPrefix, rest);
}

/**
 * `function ...` may be followed by more (`function () {}()`, `+ 1`). Named, it parses as a declaration whose body
 * ends where the function does; whatever followed the function in the expression is then a statement of its own,
 * which a `.x` on the next line continues. With nothing after the declaration, that `.x` cannot parse.
 */
function isWholeFunctionExpression(asyncPrefix: string, rest: string): boolean {
  const head = FUNCTION_HEAD.exec(rest);
  if (head === null) return false;
  const named = head[2] === undefined ? `${head[0]} __airlock_program ${rest.slice(head[0].length)}` : rest;
  const declaration = `${asyncPrefix} ${named}\n`;
  return parses(declaration) && !parses(`${declaration}.x`);
}

/**
 * An arrow's parameter list ends at a `)` followed by `=>`; the first such prefix that is a function's parameter list
 * (which keeps `(a) = (b) => 1` out) is it, since an earlier `)` would leave a parenthesis open.
 */
function startsWithArrowParameters(asyncPrefix: string, rest: string): boolean {
  let tried = 0;
  for (let end = rest.indexOf(")"); end !== -1 && tried < MAX_PARAMETER_ARROWS; end = rest.indexOf(")", end + 1)) {
    ARROW_AFTER.lastIndex = end + 1;
    if (!ARROW_AFTER.test(rest)) continue;
    tried++;
    if (parses(`(${asyncPrefix} function ${rest.slice(0, end + 1)} {}\n)`)) return true;
  }
  return false;
}

/** Compiles `code` as a script without running it. */
function parses(code: string): boolean {
  try {
    new Script(code);
    return true;
  } catch {
    return false;
  }
}
