/**
 * Type-checks a script against the declarations of its tools and globals with the TypeScript compiler, without
 * running it, so that a host can hand the model the diagnostics. `typescript` is an optional peer dependency,
 * loaded on first use.
 */
import type * as TS from "typescript";
import type { ToolLike } from "../declarations/declaration-types.ts";
import { renderDeclarations } from "../declarations/index.ts";
import { nodeRequire } from "../platform/platform.ts";

/** Declarations of what every script sees besides its tools and globals. */
export const SCRIPT_ENVIRONMENT_DECLARATIONS = `type ImageBlock = { type: "image"; data: string; mimeType: string };
/** Every tool: name is the identifier used as tools.<name>. */
declare const ALL_TOOLS: readonly { readonly name: string; readonly description: string }[];
/** Appends a text item to the output; values other than strings are JSON-stringified. */
declare function text(value: unknown): void;
/** Appends an image: a base64 data: URL, { image_url }, or an image block. */
declare function image(value: string | { image_url: string | { url: string } } | ImageBlock): void;
/** Ends the script successfully at once, keeping its output and store writes. */
declare function exit(): never;
/** Keeps a JSON value for later executions; undefined deletes the key. */
declare function store(key: string, value: unknown): void;
/** Reads a copy of a stored value. */
declare function load(key: string): any;
declare const console: {
  log(...values: unknown[]): void;
  info(...values: unknown[]): void;
  warn(...values: unknown[]): void;
  error(...values: unknown[]): void;
  debug(...values: unknown[]): void;
};
`;

export interface TypecheckDiagnostic {
  /** 1-based line in the script. */
  line: number;
  /** 1-based column in the script. */
  column: number;
  message: string;
  /** TypeScript's error code, e.g. 2345. */
  code: number;
}

export interface TypecheckResult {
  ok: boolean;
  diagnostics: TypecheckDiagnostic[];
}

export interface TypecheckOptions {
  tools?: ToolLike[];
  globals?: ToolLike[];
}

const WRAPPER = "async function __airlock_script__() {";
const SCRIPT = "/airlock/script.ts";
const ENVIRONMENT = "/airlock/environment.d.ts";

let compiler: typeof TS | undefined;
const libFiles = new Map<string, TS.SourceFile | undefined>();

function loadCompiler(): typeof TS {
  if (compiler) return compiler;
  try {
    const load = nodeRequire(import.meta.url);
    if (!load) throw new Error("no require here");
    compiler = load("typescript") as typeof TS;
  } catch {
    throw new Error("typecheckScript needs the typescript package: npm install typescript");
  }
  return compiler;
}

/**
 * Checks `code` (the body of an async function, TypeScript allowed) against the rendered declarations of `tools` and
 * `globals`. Returns the script's diagnostics with positions in the script itself; nothing runs.
 */
export function typecheckScript(code: string, options: TypecheckOptions = {}): TypecheckResult {
  if (typeof code !== "string") throw new TypeError("code must be a string");
  const ts = loadCompiler();
  const declarations = renderDeclarations(
    { tools: options.tools ?? [], globals: options.globals ?? [] },
    { indexThreshold: Number.POSITIVE_INFINITY },
  );
  // The wrapper shares line 1 with the script, so lines match and only line 1's columns shift.
  const sources = new Map([
    [SCRIPT, `${WRAPPER}${code}\n}\nexport {};\n`],
    [ENVIRONMENT, `${SCRIPT_ENVIRONMENT_DECLARATIONS}\n${declarations}\n`],
  ]);
  const compilerOptions: TS.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    lib: ["lib.es2022.d.ts"],
    types: [],
    strict: true,
    noImplicitAny: false,
    noEmit: true,
    skipLibCheck: true,
  };
  const defaultHost = ts.createCompilerHost(compilerOptions);
  const host: TS.CompilerHost = {
    ...defaultHost,
    fileExists: (name) => sources.has(name) || defaultHost.fileExists(name),
    readFile: (name) => sources.get(name) ?? defaultHost.readFile(name),
    getSourceFile: (name, languageVersion) => {
      const text = sources.get(name);
      if (text !== undefined) return ts.createSourceFile(name, text, languageVersion, true);
      // The standard library's files are parsed once per process.
      if (!libFiles.has(name)) libFiles.set(name, defaultHost.getSourceFile(name, languageVersion));
      return libFiles.get(name);
    },
    writeFile: () => {},
  };
  const program = ts.createProgram([ENVIRONMENT, SCRIPT], compilerOptions, host);
  const script = program.getSourceFile(SCRIPT);
  const raw = [
    ...program.getSyntacticDiagnostics(script),
    ...program.getSemanticDiagnostics(script),
    ...program.getSemanticDiagnostics(program.getSourceFile(ENVIRONMENT)),
  ];
  const diagnostics: TypecheckDiagnostic[] = [];
  for (const d of raw) {
    const message = ts.flattenDiagnosticMessageText(d.messageText, "\n");
    if (d.file?.fileName !== SCRIPT || d.start === undefined) {
      diagnostics.push({ line: 0, column: 0, message: `in the declarations: ${message}`, code: d.code });
      continue;
    }
    const position = d.file.getLineAndCharacterOfPosition(d.start);
    const line = position.line + 1;
    const column = position.character + 1 - (line === 1 ? WRAPPER.length : 0);
    diagnostics.push({ line, column: Math.max(1, column), message, code: d.code });
  }
  return { ok: diagnostics.length === 0, diagnostics };
}
