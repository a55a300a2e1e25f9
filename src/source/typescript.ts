import type { transformSync } from "amaro";
import { isNotFound, missingPackage, nodeRequire } from "../platform/platform.ts";
import { CodemodeSourceError } from "./source-error.ts";
import { type AmaroError, isAmaroError, toCodemodeSourceError } from "./typescript-errors.ts";

type Amaro = { transformSync: typeof transformSync };

/**
 * A script is the body of an async function, so that `await` and `return` work at its top level. amaro parses
 * whole files, so the body is parsed inside this wrapper: the opening goes on the script's first line (no line
 * moves, and only first-line columns shift, by its length) and the closing on a line of its own after the last.
 */
const BODY_START = "async function __airlock_script__(){";
const BODY_END = "\n}";

/**
 * Longest script `stripTypeScript` takes, in UTF-16 code units. amaro's time and memory grow with its input (a
 * 1 MiB script takes 0.5-1.3 s and 60-110 MiB of its WebAssembly memory on a loaded 2-core machine); a model's
 * program is a few KiB.
 */
export const MAX_TYPESCRIPT_CHARS = 1024 * 1024;

let amaro: Amaro | undefined;

/** amaro compiles its WebAssembly when loaded (about 150 ms), so it is loaded on the first call, not on import. */
function loadAmaro(): Amaro {
  if (amaro) return amaro;
  const load = nodeRequire(import.meta.url);
  if (!load)
    throw new Error("TypeScript input needs Node or Bun here: amaro, which erases the types, cannot be loaded");
  try {
    amaro = load("amaro") as Amaro;
  } catch (error) {
    if (isNotFound(error)) throw missingPackage("TypeScript input", { amaro: "1" });
    throw error;
  }
  return amaro;
}

/**
 * Drops the loaded amaro, so that the next call loads a new instance. amaro's parser recurses on the WebAssembly
 * stack (2 MiB at the bottom of its memory): a script nested a few hundred to a few thousand levels deep (`A<A<...>>`,
 * `if (a) if (a) ...`, `- - - 1`) overflows it, which traps (`RuntimeError: memory access out of bounds`, or V8's
 * `RangeError` when the native stack runs out first) and leaves its stack pointer where the trap found it: every
 * later call on that instance fails the same way. Node caches the module, so its files leave the cache too.
 */
function dropAmaro(): void {
  amaro = undefined;
  const load = nodeRequire(import.meta.url) as (((id: string) => unknown) & NodeRequireParts) | undefined;
  if (!load?.cache || !load.resolve) return;
  const entry = load.resolve("amaro");
  const folder = entry.slice(0, entry.lastIndexOf("/") + 1);
  for (const file of Object.keys(load.cache)) if (file.startsWith(folder)) delete load.cache[file];
}

type NodeRequireParts = { cache?: Record<string, unknown>; resolve?: (id: string) => string };

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
 * syntax errors in a function body (`import x = require()` and `export =` included). The script is parsed as
 * strict-mode code. A `}` that closes the script's function early is not caught here; running the script reports it.
 *
 * Throws `CodemodeSourceError` with rule `typescript-limit` for a script longer than `MAX_TYPESCRIPT_CHARS` or
 * nested too deeply for amaro's stack; the amaro that failed is dropped, so later calls work. amaro runs on the
 * calling thread with no deadline of its own: `execute()`, the MCP gateway and the AI SDK tool strip on a thread
 * of their own with `TYPESCRIPT_STRIP_TIMEOUT_MS` (see `typescript-thread.ts`).
 */
export function stripTypeScript(code: string): string {
  if (typeof code !== "string") {
    throw new TypeError(`stripTypeScript expects the script as a string, got ${code === null ? "null" : typeof code}`);
  }
  refuseLongTypeScript(code);
  const { transformSync } = loadAmaro();
  const wrapped = BODY_START + code + BODY_END;
  let stripped: string;
  try {
    stripped = transformSync(wrapped, { mode: "strip-only" }).code;
  } catch (error) {
    if (!isAmaroError(error)) throw tooDeep();
    throw toCodemodeSourceError(error, wrapped, BODY_START.length, code.length, (text) => reparse(text, transformSync));
  }
  if (!stripped.startsWith(BODY_START) || !stripped.endsWith(BODY_END)) {
    throw new Error("stripTypeScript: amaro changed the function that wraps the script");
  }
  return stripped.slice(BODY_START.length, stripped.length - BODY_END.length);
}

/** Throws `CodemodeSourceError` (rule `typescript-limit`) for a script longer than `MAX_TYPESCRIPT_CHARS`. */
export function refuseLongTypeScript(code: string): void {
  if (code.length <= MAX_TYPESCRIPT_CHARS) return;
  throw new CodemodeSourceError(
    "typescript-limit",
    `The TypeScript script has ${code.length} characters; types are stripped from scripts of at most ${MAX_TYPESCRIPT_CHARS}. Write a shorter program.`,
  );
}

/**
 * A failure of amaro itself rather than an error it reports about the script: a trap of its WebAssembly, in
 * practice always a script nested too deeply for its stack (see `dropAmaro`). The instance is dropped whatever it was.
 */
function tooDeep(): CodemodeSourceError {
  dropAmaro();
  return new CodemodeSourceError(
    "typescript-limit",
    "The TypeScript script nests too deeply for its types to be stripped (brackets, generics, operators or statements inside each other). Write flatter code, or plain JavaScript.",
  );
}

function reparse(wrappedSource: string, transform: typeof transformSync): AmaroError | undefined {
  try {
    transform(wrappedSource, { mode: "strip-only" });
  } catch (error) {
    if (isAmaroError(error)) return error;
    // A trap here leaves amaro as broken as one in the first parse.
    dropAmaro();
  }
  return undefined;
}
