/** `airlock run <file|->`: runs one script in a sandbox and prints what it produced. */
import { constants as bufferConstants } from "node:buffer";
import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import { setFlagsFromString } from "node:v8";
// The modules a run needs rather than the package's index, which also loads zod for tool schemas (~0.1 s).
import { DEFAULT_TIMEOUT_MS } from "../engine/limits.ts";
import { InlineCodemodeSandbox } from "../inline/sandbox.ts";
import { type CodemodeSandboxBase, DEFAULT_MEMORY_LIMIT_BYTES } from "../sandbox/base.ts";
import { parseCodemodeSource } from "../source/options-line.ts";
import { CodemodeSourceError } from "../source/source-error.ts";
import type {
  CodemodeOutputItem,
  CodemodeProgressEvent,
  CodemodeResult,
  CodemodeSandboxBaseOptions,
} from "../types.ts";
import { CodemodeSandbox } from "../worker/sandbox.ts";
import { EXIT_FAILED, EXIT_OK, oneOf, parseFlags, positiveInteger, timeoutFlag, UsageError } from "./args.ts";
import type { CliIo, Command } from "./command.ts";
import { formatError, formatOutput, formatValue, nameFrames, type ScriptSource } from "./format.ts";
import { connectConfig } from "./mcp-config.ts";
import { applyStoreWrites, readStore, type StoreObject, writeStore } from "./store-file.ts";
import { loadTools } from "./tools.ts";

/** The sandbox's heap cap goes up to 4 GiB. */
const MAX_MEMORY_MIB = 4096;
const ISOLATIONS = ["worker", "inline", "process", "gvisor"] as const;

const USAGE = `Usage: airlock run <file|-> [options]

Runs a script in the sandbox. The script is the body of an async function: it can await tools.<name>(args),
print with text(), console.log() and image(), keep state with store(key, value) and load(key), and return a value.
Pass - as the file to read the script from stdin.

Options:
  --tools <module>     JS module whose default export is an array of tools:
                       { name, description?, inputSchema?, outputSchema?, execute(args, { signal }) }
  --config <mcp.json>  MCP servers whose tools the script calls, in the format airlock serve reads:
                       tool <tool> of server <server> is tools.<server>__<tool>(args)
  --read-only          With --config, only the tools annotated readOnlyHint: true
  --timeout <ms>       Deadline of the run in milliseconds, tool calls included (default ${DEFAULT_TIMEOUT_MS})
  --memory <MiB>       Heap cap of the script's VM in MiB (default ${DEFAULT_MEMORY_LIMIT_BYTES / 1024 / 1024})
  --isolation <mode>   worker: run the VM on a worker thread (default)
                       inline: run it on the CLI's own thread, where Ctrl-C is noticed only when
                       the script awaits (a busy loop runs until --timeout)
                       process: run it in a child process under bubblewrap (namespaces, seccomp, rlimits)
                       gvisor: run that child under gVisor's runsc (needs root)
  --store <file.json>  JSON object that load() reads; after a successful run the script's store() writes
                       are saved back to it (a missing file starts empty; its directory must exist)
  --ts                 The script is TypeScript: types are erased before it runs (not type-checked)
  --json               Print the whole result object as JSON instead
  -h, --help           Show this help

A first line "// @options: {"timeout_ms": 30000, "max_output_tokens": 2000}" sets the script's deadline (the
smaller one wins when --timeout is given too) and cuts the printed output and value to that many tokens
(o200k_base), with a note saying so (--json prints the whole result).

Without --json, the output is printed as the script produces it (text and console lines, images as
"[image <type>, <n> bytes]"; all at the end when a max_output_tokens line must cut it), then the returned
value: strings as is, other values as JSON.
A failed run prints the error kind and message to stderr, with the failing line of the script and its stack.

Exit status: 0 the run succeeded, 1 it failed (script error, timeout, out of memory, Ctrl-C, an MCP server
of --config that did not start), 2 bad usage (also an empty script, or a bad config).
`;

const flags = {
  tools: { type: "string" },
  config: { type: "string" },
  "read-only": { type: "boolean" },
  timeout: { type: "string" },
  memory: { type: "string" },
  isolation: { type: "string" },
  store: { type: "string" },
  json: { type: "boolean" },
  ts: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const;

export const runCommand: Command = {
  name: "run",
  synopsis: "run <file|->",
  summary: "Run a script (a file, or - for stdin) in the sandbox",
  usage: USAGE,
  run,
};

async function run(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags(argv, flags);
  if (values.help) {
    io.stdout(USAGE);
    return EXIT_OK;
  }
  const script = positionals[0];
  if (script === undefined) throw new UsageError("missing script: pass a file, or - to read the script from stdin");
  if (positionals.length > 1) {
    throw new UsageError(`expected one script, got ${positionals.length}: ${positionals.join(" ")}`);
  }
  const options: CodemodeSandboxBaseOptions = {};
  if (values.timeout !== undefined) {
    options.timeoutMs = timeoutFlag(values.timeout);
  }
  if (values.memory !== undefined) {
    options.memoryLimitBytes = positiveInteger("--memory", values.memory, MAX_MEMORY_MIB, "MiB") * 1024 * 1024;
  }
  const isolation = values.isolation === undefined ? "worker" : oneOf("--isolation", values.isolation, ISOLATIONS);
  if (values["read-only"] && values.config === undefined) throw new UsageError("--read-only needs --config <mcp.json>");

  const source = await readScript(script, io);
  const where: ScriptSource = { name: script === "-" ? "<stdin>" : script, text: source };
  let code: string;
  let maxOutputTokens: number | undefined;
  try {
    const parsed = parseCodemodeSource(source);
    code = parsed.code;
    const fromLine = parsed.options.timeoutMs;
    if (fromLine !== undefined) options.timeoutMs = Math.min(fromLine, options.timeoutMs ?? fromLine);
    maxOutputTokens = parsed.options.maxOutputTokens;
  } catch (error) {
    if (!(error instanceof CodemodeSourceError)) throw error;
    io.stderr(`airlock run: ${where.name}: ${error.message}\n`);
    return EXIT_FAILED;
  }
  if (values.ts) options.typescript = true;
  const storePath = values.store === undefined ? undefined : resolve(io.cwd, values.store);
  const store = storePath === undefined ? undefined : await readStore(storePath, values.store as string);
  if (values.tools !== undefined) options.tools = await loadTools(values.tools, io.cwd);
  const toolset =
    values.config === undefined
      ? undefined
      : await connectConfig(values.config, io, { command: "run", readOnly: values["read-only"] === true });
  try {
    if (toolset) options.tools = [...(options.tools ?? []), ...toolset.tools];
    return await runScript({ isolation, options, code, maxOutputTokens, where, storePath, store }, values, io);
  } finally {
    await toolset?.close();
  }
}

async function runScript(
  run: {
    isolation: (typeof ISOLATIONS)[number];
    options: CodemodeSandboxBaseOptions;
    code: string;
    maxOutputTokens: number | undefined;
    where: ScriptSource;
    storePath: string | undefined;
    store: StoreObject | undefined;
  },
  values: { tools?: string; config?: string; store?: string; json?: boolean },
  io: CliIo,
): Promise<number> {
  const { isolation, options, code, maxOutputTokens, where, storePath, store } = run;
  // This process runs one script and exits: V8's optimising tier would compile QuickJS's hot functions in the
  // background, and Node waits for those jobs before it exits (200-450 ms after the result, measured), for code
  // that one short run hardly uses. Set before the module is compiled, which the sandbox does.
  setFlagsFromString("--liftoff-only");
  // The process tier's modules are loaded only for a run that asks for it.
  const tier = isolation === "process" || isolation === "gvisor" ? await import("../process/index.ts") : undefined;
  let sandbox: CodemodeSandboxBase;
  try {
    sandbox =
      isolation === "inline"
        ? new InlineCodemodeSandbox(options)
        : tier
          ? new tier.ProcessCodemodeSandbox({
              ...options,
              poolSize: 1,
              isolation: { runtime: isolation === "gvisor" ? "gvisor" : "bwrap" },
            })
          : new CodemodeSandbox({ ...options, poolSize: 1 });
  } catch (error) {
    if (tier && error instanceof tier.IsolationUnavailableError) {
      throw new UsageError(`--isolation ${isolation}: ${error.message}`);
    }
    // The flags and (by loadTools, with the same checks) the tool list were checked above; this keeps the message.
    if (values.tools === undefined && values.config === undefined) throw error;
    const from = [values.tools && `--tools ${values.tools}`, values.config && `--config ${values.config}`];
    throw new UsageError(`${from.filter(Boolean).join(" and ")}: ${(error as Error).message}`);
  }
  // Output is printed as it comes, unless it is all printed at the end: as JSON, or cut to max_output_tokens.
  const streamed = !values.json && maxOutputTokens === undefined;
  const onProgress = streamed
    ? (event: CodemodeProgressEvent) => {
        if (event.type === "output") io.stdout(formatOutput([event.item]));
      }
    : undefined;
  const result = await execute(sandbox, code, store && { label: values.store as string, value: store }, io, onProgress);

  if (values.json) {
    if (!result.ok && result.error.stack) result.error.stack = nameFrames(result.error.stack, where.name);
    io.stdout(`${JSON.stringify(result, null, 2)}\n`);
  } else {
    const printed: CodemodeOutputItem[] = streamed ? [] : [...result.output];
    if (result.ok && result.value !== undefined) printed.push({ type: "text", text: formatValue(result.value) });
    io.stdout(formatOutput(maxOutputTokens === undefined ? printed : await cutOutput(printed, maxOutputTokens)));
    if (!result.ok) io.stderr(formatError(result.error, where));
  }
  if (!result.ok) return EXIT_FAILED;
  if (storePath !== undefined && store !== undefined) {
    try {
      await writeStore(storePath, applyStoreWrites(store, result.storeWrites));
    } catch (error) {
      io.stderr(
        `airlock: the run succeeded, but --store ${values.store} could not be written: ${(error as Error).message}\n`,
      );
      return EXIT_FAILED;
    }
  }
  return EXIT_OK;
}

async function readScript(file: string, io: CliIo): Promise<string> {
  const what = file === "-" ? "the script from stdin" : `script file ${file}`;
  let text: string;
  try {
    text = file === "-" ? await io.readStdin() : await readFile(resolve(io.cwd, file), "utf8");
  } catch (error) {
    const { code, message } = error as NodeJS.ErrnoException;
    if (code === "ENOENT" && file !== "-") throw new UsageError(`script file not found: ${file}`);
    // A script longer than the longest string V8 makes (about 512 MiB) fails as "RangeError: Invalid string length".
    const reason =
      error instanceof RangeError
        ? `it is too large (a script is at most ${bufferConstants.MAX_STRING_LENGTH} characters)`
        : message;
    throw new UsageError(`cannot read ${what}: ${reason}`);
  }
  if (text.trim() === "") {
    throw new UsageError(file === "-" ? "no script on stdin: pipe one in, or pass a file" : `${what} is empty`);
  }
  return text;
}

/** The printed items cut to `maxTokens` tokens of text, as the MCP gateway cuts a result, with its note. */
async function cutOutput(items: CodemodeOutputItem[], maxTokens: number): Promise<CodemodeOutputItem[]> {
  // Loaded only for a script that asks: the module and its tokenizer are not part of every run's start-up.
  const { cutBlocks } = await import("../gateway/output.ts");
  return cutBlocks(items, { maxOutputTokens: maxTokens });
}

/** Runs the script with Ctrl-C wired to abort it, and always closes the sandbox afterwards. */
async function execute(
  sandbox: CodemodeSandboxBase,
  code: string,
  store: { label: string; value: StoreObject } | undefined,
  io: CliIo,
  onProgress: ((event: CodemodeProgressEvent) => void) | undefined,
): Promise<CodemodeResult> {
  const controller = new AbortController();
  const stopListening = io.onInterrupt(() => controller.abort());
  try {
    return await sandbox.execute(code, { signal: controller.signal, store: store?.value, onProgress });
  } catch (error) {
    // execute() rejects only for arguments it cannot take; the code is a string, so it is the store.
    throw new UsageError(`--store ${store?.label}: ${(error as Error).message}`);
  } finally {
    stopListening();
    await sandbox.close();
  }
}
