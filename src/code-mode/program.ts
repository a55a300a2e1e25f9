/**
 * Programs: `defineCodeProgram` captures a program without running it. The result is frozen and carries a SHA-256
 * digest over the canonical JSON of its source, tools (by id, version and digest), limits and metadata (including
 * the JSON Schema of its input and output), so that approvals and audit records can refer to that exact program.
 */
import type { z } from "zod";
import { jsonDigest, MAX_JSON_BYTES } from "../json/index.ts";
import { checkInteger, optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import { CodemodeSourceError } from "../source/source-error.ts";
import { stripTypeScript } from "../source/typescript.ts";
import { type AnyTool, isTool } from "../tools/define.ts";
import { AirlockError, CONFIG_OPTION_ERRORS, configError } from "../tools/errors.ts";
import { checkId, checkName, checkSchema, checkText, MAX_NAME_CHARS, schemaDescription } from "../tools/validate.ts";
import { functionSourceProblem } from "./function-source.ts";

/** Characters of a program's source. */
export const MAX_SOURCE_CHARS = 1024 * 1024;
/** Entries of `approvedImports`. */
export const MAX_APPROVED_IMPORTS = 64;
/** Largest byte cap of a value crossing the sandbox boundary (input, output, one tool input). */
export const MAX_BOUNDARY_BYTES = 4 * 1024 * 1024;

/** Every limit is required; zero never means unlimited. */
export interface CodeProgramLimits {
  /** Time the program may compute; time waiting on tools does not count. */
  readonly cpuMillis: number;
  /** Wall-clock time of the whole execution, tool calls included. */
  readonly wallTimeMillis: number;
  /** Heap of the sandbox. */
  readonly memoryBytes: number;
  /** Scratch storage for sandboxes that have a file system; QuickJS has none, so it uses none. */
  readonly scratchBytes: number;
  /** UTF-8 bytes of the input's JSON. */
  readonly maxInputBytes: number;
  /** UTF-8 bytes of the output's JSON. */
  readonly maxOutputBytes: number;
  /** UTF-8 bytes of one tool call's input JSON. */
  readonly maxToolInputBytes: number;
  /** Tool calls the program may make; calls past it get LIMIT_EXCEEDED. */
  readonly maxToolCalls: number;
  /** Tool calls in flight at once; further calls wait their turn. */
  readonly maxToolConcurrency: number;
}

/** The range of each limit, inclusive. The upper bounds of time, memory and concurrency are Mayura's. */
export const CODE_PROGRAM_LIMIT_RANGES: { readonly [K in keyof CodeProgramLimits]: readonly [number, number] } =
  Object.freeze({
    cpuMillis: [1, 60 * 60 * 1000],
    wallTimeMillis: [1, 60 * 60 * 1000],
    memoryBytes: [1024 * 1024, 2 * 1024 * 1024 * 1024],
    scratchBytes: [0, 64 * 1024 * 1024 * 1024],
    maxInputBytes: [1, MAX_BOUNDARY_BYTES],
    maxOutputBytes: [1, MAX_BOUNDARY_BYTES],
    maxToolInputBytes: [1, MAX_BOUNDARY_BYTES],
    maxToolCalls: [0, 100_000],
    maxToolConcurrency: [1, 128],
  } as const);

const LIMIT_NAMES = Object.keys(CODE_PROGRAM_LIMIT_RANGES) as (keyof CodeProgramLimits)[];

/**
 * A preset of every limit, for a program that calls a few tools on small JSON: 1 s of CPU, 10 s in all, 32 MiB, 64 KiB
 * of input and output, 16 KiB per call, 32 calls, one at a time. Spread it and change what the program needs
 * (`{ ...CODE_PROGRAM_LIMITS, maxToolCalls: 200 }`). Its values are part of a program's digest like any limits: a
 * durable program that must resume across upgrades of Airlock writes its limits out.
 */
export const CODE_PROGRAM_LIMITS: CodeProgramLimits = Object.freeze({
  cpuMillis: 1_000,
  wallTimeMillis: 10_000,
  memoryBytes: 32 * 1024 * 1024,
  scratchBytes: 0,
  maxInputBytes: 64 * 1024,
  maxOutputBytes: 64 * 1024,
  maxToolInputBytes: 16 * 1024,
  maxToolCalls: 32,
  maxToolConcurrency: 1,
});

/**
 * The language the source is written in. A TypeScript program's types are erased when it is defined (its digest is
 * over the source as written); Airlock's adapters run it, and an adapter of your own only if it declares `languages`.
 */
export type CodeLanguage = "javascript" | "typescript";
/** Every `CodeLanguage`. */
export const CODE_LANGUAGES: readonly CodeLanguage[] = Object.freeze(["javascript", "typescript"]);

export interface CodeProgramDefinition<I extends z.ZodType, O extends z.ZodType> {
  id: string;
  version: string;
  /** What the program is for, in words an approver reads. */
  intent: string;
  language: CodeLanguage;
  /** A function expression: `async (input, tools) => output`, with types when the language is TypeScript. */
  source: string;
  input: I;
  output: O;
  inputSchemaId: string;
  outputSchemaId: string;
  /** The only tools the program can call. */
  tools: readonly AnyTool[];
  /**
   * Bare package specifiers the program may import, as approved by whoever reviewed it. Airlock's QuickJS adapters
   * run no imports: a program that lists any is UNSUPPORTED_PROFILE there. Default none.
   */
  approvedImports?: readonly string[];
  limits: CodeProgramLimits;
}

export interface CodeProgram<I extends z.ZodType = z.ZodType, O extends z.ZodType = z.ZodType> {
  readonly kind: "airlock.code-program";
  readonly id: string;
  readonly version: string;
  readonly intent: string;
  readonly language: CodeLanguage;
  /** The source as digested: line endings normalised to `\n`. */
  readonly source: string;
  /**
   * The source as JavaScript: `source` itself, or for a TypeScript program `source` with its types erased in place
   * (replaced by spaces, so that lines and columns stay where they were). Not digested: it follows from `source`.
   */
  readonly javascript: string;
  readonly input: I;
  readonly output: O;
  readonly inputSchemaId: string;
  readonly outputSchemaId: string;
  readonly tools: readonly AnyTool[];
  readonly approvedImports: readonly string[];
  readonly limits: CodeProgramLimits;
  /** `maxToolCalls` times the most expensive tool's `costMicros`. */
  readonly maximumCostMicros: number;
  /** `sha256:` and the hex SHA-256 of the canonical JSON of everything above. */
  readonly digest: string;
}

/** A definition's fields, and a program's own (recomputed), so that `defineCodeProgram({ ...program, id })` works. */
const PROGRAM_DEFINITION_KEYS = [
  ...optionKeys<CodeProgramDefinition<z.ZodType, z.ZodType>>({
    id: true,
    version: true,
    intent: true,
    language: true,
    source: true,
    input: true,
    output: true,
    inputSchemaId: true,
    outputSchemaId: true,
    tools: true,
    approvedImports: true,
    limits: true,
  }),
  ...optionKeys<Omit<CodeProgram, keyof CodeProgramDefinition<z.ZodType, z.ZodType>>>({
    kind: true,
    javascript: true,
    maximumCostMicros: true,
    digest: true,
  }),
];

// biome-ignore lint/suspicious/noExplicitAny: a program of any schemas.
export type AnyCodeProgram = CodeProgram<any, any>;

const programs = new WeakSet<object>();

/** True only for programs made by `defineCodeProgram`. */
export function isCodeProgram(value: unknown): value is AnyCodeProgram {
  return typeof value === "object" && value !== null && programs.has(value);
}

export function defineCodeProgram<I extends z.ZodType, O extends z.ZodType>(
  definition: CodeProgramDefinition<I, O>,
): CodeProgram<I, O> {
  if (typeof definition !== "object" || definition === null) {
    throw configError("defineCodeProgram needs a definition object");
  }
  refuseUnknownOptions(definition, "a program definition", PROGRAM_DEFINITION_KEYS, CONFIG_OPTION_ERRORS, "field");
  const id = checkId(definition.id, "program id");
  const version = checkName(definition.version, "program version");
  const intent = checkText(definition.intent, "program intent");
  const language = definition.language;
  if (!CODE_LANGUAGES.includes(language)) {
    throw configError("program language must be 'javascript' or 'typescript'");
  }
  if (typeof definition.source !== "string" || definition.source.trim() === "") {
    throw configError("program source must be a non-empty string");
  }
  if (definition.source.length > MAX_SOURCE_CHARS) {
    throw configError(`program source may have at most ${MAX_SOURCE_CHARS} characters`);
  }
  const source = definition.source.replace(/\r\n?/g, "\n");
  const javascript = language === "typescript" ? eraseTypes(source) : source;
  // The VM calls the source with (input, tools): a script body or a statement would fail only when run.
  const notFunction = functionSourceProblem(javascript);
  if (notFunction !== undefined) {
    throw configError(
      `program source must be a function expression like async (input, tools) => { ... }: ${notFunction}`,
    );
  }
  const input = checkSchema(definition.input, "program input") as I;
  const output = checkSchema(definition.output, "program output") as O;
  const inputSchemaId = checkName(definition.inputSchemaId, "program inputSchemaId");
  const outputSchemaId = checkName(definition.outputSchemaId, "program outputSchemaId");
  if (!Array.isArray(definition.tools)) throw configError("program tools must be an array of tools");
  const ids = new Set<string>();
  for (const tool of definition.tools) {
    if (!isTool(tool)) throw configError("program tools must be made by defineTool");
    if (ids.has(tool.id)) throw configError("program tools must have distinct ids");
    ids.add(tool.id);
  }
  const tools = Object.freeze([...definition.tools]);
  const approvedImports = checkImports(definition.approvedImports);
  const limits = checkLimits(definition.limits);
  const maxCost = tools.reduce((max, tool) => Math.max(max, tool.costMicros), 0);
  const maximumCostMicros = maxCost * limits.maxToolCalls;
  if (!Number.isSafeInteger(maximumCostMicros)) {
    // A cost that cannot be counted exactly could not be reserved or reconciled exactly either.
    throw new AirlockError(
      "LIMIT_EXCEEDED",
      "the program's maximum cost (its most expensive tool's costMicros times limits.maxToolCalls) is past Number.MAX_SAFE_INTEGER",
    );
  }
  const digest = jsonDigest(
    {
      kind: "airlock.code-program/1",
      id,
      version,
      intent,
      language,
      // Listed only when there are some, so that the digests of programs without imports stay what they were.
      ...(approvedImports.length > 0 ? { approvedImports } : {}),
      source,
      inputSchemaId,
      outputSchemaId,
      input: schemaDescription(input, "input"),
      output: schemaDescription(output, "output"),
      tools: tools.map((tool) => ({ id: tool.id, version: tool.version, digest: tool.digest })),
      limits: { ...limits },
    },
    { maxBytes: MAX_JSON_BYTES },
  );
  const program: CodeProgram<I, O> = Object.freeze({
    kind: "airlock.code-program" as const,
    id,
    version,
    intent,
    language,
    source,
    javascript,
    input,
    output,
    inputSchemaId,
    outputSchemaId,
    tools,
    approvedImports,
    limits,
    maximumCostMicros,
    digest,
  });
  programs.add(program);
  return program;
}

/**
 * Around the source while its types are erased: the type stripper parses a function body, in which a function
 * expression (`async function (input) {}`) is a statement only in parentheses. The opening shares the first line,
 * so only first-line columns shift, by one.
 */
const ERASE_OPEN = "(";
const ERASE_CLOSE = "\n)";

/**
 * A TypeScript source as JavaScript, its types replaced by spaces (`stripTypeScript`). A source that cannot be
 * stripped is INVALID_CONFIG, with where it failed but no text of the source in the message.
 */
function eraseTypes(source: string): string {
  let stripped: string;
  try {
    stripped = stripTypeScript(ERASE_OPEN + source + ERASE_CLOSE);
  } catch (error) {
    throw configError(
      `program source is TypeScript that Airlock cannot strip of its types: ${stripProblem(source, error)}`,
    );
  }
  if (!stripped.startsWith(ERASE_OPEN) || !stripped.endsWith(ERASE_CLOSE)) {
    throw configError("program source is TypeScript that Airlock cannot strip of its types in place");
  }
  return stripped.slice(ERASE_OPEN.length, stripped.length - ERASE_CLOSE.length);
}

/** Why the type stripper refused `source`, in Airlock's words: the rule broken and where, in the source as written. */
function stripProblem(source: string, error: unknown): string {
  const known =
    error instanceof CodemodeSourceError && (error.rule === "typescript" || error.rule === "typescript-unsupported");
  if (!known || error.line === undefined) return "the type stripper could not read it (it may be nested too deeply)";
  const lines = source.split("\n").length;
  const column =
    error.column === undefined ? 1 : Math.max(1, error.column - (error.line === 1 ? ERASE_OPEN.length : 0));
  const where = error.line > lines ? "at the end of the source" : `at line ${error.line}, column ${column}`;
  return error.rule === "typescript-unsupported"
    ? `it uses TypeScript that needs code generation, not erasure (an enum, a namespace, a parameter property or a \`<T>value\` assertion), ${where}`
    : `a syntax error ${where}`;
}

function checkImports(value: unknown): readonly string[] {
  if (value === undefined) return Object.freeze([]);
  if (!Array.isArray(value) || value.length > MAX_APPROVED_IMPORTS) {
    throw configError(`program approvedImports must be an array of at most ${MAX_APPROVED_IMPORTS} specifiers`);
  }
  const seen = new Set<string>();
  for (const specifier of value as unknown[]) {
    // A bare package name: no URL scheme (`node:`, `https:`), no absolute or Windows path.
    if (
      typeof specifier !== "string" ||
      specifier.trim() === "" ||
      specifier.length > MAX_NAME_CHARS ||
      specifier.includes(":") ||
      specifier.includes("\\") ||
      specifier.startsWith("/")
    ) {
      throw configError(
        `every entry of program approvedImports must be a bare package specifier of 1-${MAX_NAME_CHARS} characters, without ':', '\\' or a leading '/'`,
      );
    }
    if (seen.has(specifier)) throw configError("program approvedImports may not list the same specifier twice");
    seen.add(specifier);
  }
  return Object.freeze([...(value as string[])]);
}

function checkLimits(value: unknown): CodeProgramLimits {
  if (typeof value !== "object" || value === null) throw configError("program limits are required");
  refuseUnknownOptions(value, "program limits", LIMIT_NAMES, CONFIG_OPTION_ERRORS, "limit");
  const limits = {} as Record<keyof CodeProgramLimits, number>;
  for (const name of LIMIT_NAMES) {
    const [min, max] = CODE_PROGRAM_LIMIT_RANGES[name];
    const limit = (value as Record<string, unknown>)[name];
    if (limit === undefined) throw configError(`program limits.${name} is required`);
    limits[name] = checkInteger(limit, `program limits.${name}`, min, max, CONFIG_OPTION_ERRORS);
  }
  return Object.freeze(limits);
}
