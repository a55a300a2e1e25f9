import type { transformSync } from "amaro";
import { nodeRequire } from "../platform/platform.ts";
import { type AmaroError, isAmaroError, toCodemodeSourceError } from "./typescript-errors.ts";

type Amaro = { transformSync: typeof transformSync };

/**
 * A script is the body of an async function, so that `await` and `return` work at its top level. amaro parses
 * whole files, so the body is parsed inside this wrapper: the opening goes on the script's first line (no line
 * moves, and only first-line columns shift, by its length) and the closing on a line of its own after the last.
 */
const BODY_START = "async function __airlock_script__(){";
const BODY_END = "\n}";

let amaro: Amaro | undefined;

/** amaro compiles its WebAssembly when loaded (about 150 ms), so it is loaded on the first call, not on import. */
function loadAmaro(): Amaro {
  if (amaro) return amaro;
  const load = nodeRequire(import.meta.url);
  if (!load)
    throw new Error("TypeScript input needs Node or Bun here: amaro, which erases the types, cannot be loaded");
  amaro = load("amaro") as Amaro;
  return amaro;
}

/**
 * Removes the TypeScript types from a script (the body of an async function) without type-checking it. Types
 * become whitespace, so every line and column stays where it was and stack traces point at the script as written.
 * Plain JavaScript comes back unchanged. Uses amaro, Node's own type stripper, in its "strip-only" mode; the one
 * place where it moves a character is a return type on its own line after an arrow function's parameters, where
 * it moves the `)` down to keep the arrow legal.
 *
 * Throws `CodemodeSourceError` with rule `typescript` for a syntax error, and `typescript-unsupported` for
 * TypeScript that needs code generation rather than erasure (enums, namespaces, parameter properties, `<T>value`
 * assertions); the message gives the 1-based line and column in the script. `import` and `export` statements are
 * syntax errors in a function body (`import x = require()` and `export =` included). The script is parsed as strict-mode code. A `}` that closes the script's function early is not
 * caught here; running the script reports it.
 */
export function stripTypeScript(code: string): string {
  if (typeof code !== "string") {
    throw new TypeError(`stripTypeScript expects the script as a string, got ${code === null ? "null" : typeof code}`);
  }
  const { transformSync } = loadAmaro();
  const wrapped = BODY_START + code + BODY_END;
  let stripped: string;
  try {
    stripped = transformSync(wrapped, { mode: "strip-only" }).code;
  } catch (error) {
    if (!isAmaroError(error)) throw error;
    throw toCodemodeSourceError(error, wrapped, BODY_START.length, code.length, (text) => reparse(text, transformSync));
  }
  if (!stripped.startsWith(BODY_START) || !stripped.endsWith(BODY_END)) {
    throw new Error("stripTypeScript: amaro changed the function that wraps the script");
  }
  return stripped.slice(BODY_START.length, stripped.length - BODY_END.length);
}

function reparse(wrappedSource: string, transform: typeof transformSync): AmaroError | undefined {
  try {
    transform(wrappedSource, { mode: "strip-only" });
  } catch (error) {
    if (isAmaroError(error)) return error;
  }
  return undefined;
}
