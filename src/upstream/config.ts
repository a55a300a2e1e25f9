/**
 * The config file: the format desktop MCP clients already use, `{ "mcpServers": { "<name>": { command, args, env } |
 * { url, headers } } }`, or VS Code's (`{ "servers": { … }, "inputs": [ … ] }`, with `envFile`), plus two Airlock
 * fields per server (`tools`, an allow-list, `readOnly`, and `approval`: the tools a person approves each call of) and
 * one at the top (`readOnly`). Values may use `${VAR}`,
 * `${VAR:-default}` and VS Code's `${env:VAR}` to read the environment, and `${userHome}` and `${workspaceFolder}`.
 */
import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { basename, dirname, isAbsolute, resolve } from "node:path";
import { optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import { serverPrefix } from "./tool-names.ts";
import { McpConfigError } from "./upstream-errors.ts";

/** A server started as a child process, spoken to over its stdin and stdout. */
export interface McpStdioServerConfig {
  type?: "stdio";
  command: string;
  args?: string[];
  /** Added to a small safe default environment (PATH, HOME, USER, SHELL, TERM, LOGNAME). */
  env?: Record<string, string>;
  /** A file of `NAME=value` lines added to the environment before `env` (VS Code's field). */
  envFile?: string;
  cwd?: string;
  /** Which of the server's tools to expose, by their names on the server: `"*"` (the default) for all. */
  tools?: "*" | string[];
  /** Expose only the tools whose annotations say `readOnlyHint: true`. */
  readOnly?: boolean;
  /** Which tools a person approves each call of, through the gateway client (see approval.ts). Default "never". */
  approval?: McpApprovalConfig;
  /** Leave the server out (as some desktop clients do). */
  disabled?: boolean;
}

/** A server reached over Streamable HTTP. */
export interface McpHttpServerConfig {
  type?: "http" | "streamable-http" | "streamableHttp";
  url: string;
  headers?: Record<string, string>;
  tools?: "*" | string[];
  readOnly?: boolean;
  approval?: McpApprovalConfig;
  disabled?: boolean;
}

/** A server's `approval` field: every tool, none, or the named tools (by their names on the server). */
export type McpApprovalConfig = "always" | "never" | string[];

export type McpServerConfig = McpStdioServerConfig | McpHttpServerConfig;

export interface McpConfig {
  /** The servers by name (Claude Desktop, Cursor and others); VS Code writes `servers`; either or both may be given. */
  mcpServers?: Record<string, McpServerConfig>;
  servers?: Record<string, McpServerConfig>;
  /** Read-only mode for every server. */
  readOnly?: boolean;
}

interface ServerSpecBase {
  /** The server's key in `mcpServers`. */
  name: string;
  /** The identifier its tools start with: `<prefix>__<tool>`. */
  prefix: string;
  /** Tool names to expose, or `null` for all. */
  allow: string[] | null;
  readOnly: boolean;
  /** The tools whose every call a person approves: all, none, or these names. */
  approval: "always" | "never" | string[];
}

/** One server of a checked config, with `${VAR}` references expanded. */
export type McpServerSpec =
  | (ServerSpecBase & {
      transport: "stdio";
      command: string;
      args: string[];
      env: Record<string, string>;
      cwd: string | undefined;
    })
  | (ServerSpecBase & { transport: "http"; url: URL; headers: Record<string, string> });

export interface ParsedMcpConfig {
  servers: McpServerSpec[];
  /** Things that are allowed but probably not meant: unknown fields, disabled servers. */
  warnings: string[];
}

export interface ParseMcpConfigOptions {
  /** Where `${VAR}` references are looked up. Default `process.env`. */
  env?: Readonly<Record<string, string | undefined>>;
  /** Read-only mode for every server, whatever the config says. */
  readOnly?: boolean;
  /** How messages name the config, for example its file name. Default "the config". */
  source?: string;
  /**
   * The directory relative paths (`cwd`, `envFile`) are resolved against and `${workspaceFolder}` names: the config
   * file's (the parent of a `.vscode` directory holding it). Default the current directory.
   */
  baseDir?: string;
}

const PARSE_KEYS = optionKeys<ParseMcpConfigOptions>({ env: true, readOnly: true, source: true, baseDir: true });
const STDIO_FIELDS = new Set([
  "type",
  "command",
  "args",
  "env",
  "envFile",
  "cwd",
  "tools",
  "readOnly",
  "approval",
  "disabled",
]);
const HTTP_FIELDS = new Set(["type", "url", "headers", "tools", "readOnly", "approval", "disabled"]);
const TOP_FIELDS = new Set(["mcpServers", "servers", "inputs", "readOnly"]);
/** The largest `envFile` read. */
const MAX_ENV_FILE_BYTES = 1024 * 1024;
const HTTP_TYPES = new Set(["http", "streamable-http", "streamableHttp"]);
const EXAMPLE =
  '{ "mcpServers": { "files": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."] } } }';

/** Reads and checks a config file; errors name the file, the server and the field. */
export async function loadMcpConfig(path: string, options: ParseMcpConfigOptions = {}): Promise<ParsedMcpConfig> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    const { code, message } = error as NodeJS.ErrnoException;
    throw new McpConfigError(
      code === "ENOENT" ? `config file not found: ${path}` : `cannot read config file ${path}: ${message}`,
    );
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new McpConfigError(`config file ${path} is not valid JSON: ${(error as Error).message}`);
  }
  const dir = dirname(resolve(path));
  const baseDir = basename(dir) === ".vscode" ? dirname(dir) : dir;
  return parseMcpConfig(value, { source: path, baseDir, ...options });
}

/**
 * Other clients' configs carry fields of their own, so an unknown field is only a warning; but one that differs from a
 * field of ours only in case or separators (`readonly`, `read_only`, `Tools`) is a misspelling, and ignoring it would
 * quietly widen what the gateway exposes.
 */
function refuseNearMiss(key: string, known: ReadonlySet<string>, where: string, server?: string): void {
  const loose = (field: string) => field.toLowerCase().replace(/[-_]/g, "");
  for (const field of known) {
    if (loose(field) === loose(key)) {
      throw new McpConfigError(`${where}: unknown field "${key}"; did you mean "${field}"?`, { server, field: key });
    }
  }
}

/** Checks a config object. Throws `McpConfigError` naming the server and field at the first problem. */
export function parseMcpConfig(value: unknown, options: ParseMcpConfigOptions = {}): ParsedMcpConfig {
  refuseUnknownOptions(options, "parseMcpConfig", PARSE_KEYS);
  const source = options.source ?? "the config";
  const env = options.env ?? process.env;
  if (!isRecord(value))
    throw new McpConfigError(`${source} must be a JSON object like ${EXAMPLE}, got ${describe(value)}`);
  const warnings: string[] = [];
  for (const key of Object.keys(value)) {
    if (TOP_FIELDS.has(key)) continue;
    refuseNearMiss(key, TOP_FIELDS, source);
    warnings.push(`${source}: unknown top-level field "${key}" ignored`);
  }
  if (value.mcpServers === undefined && value.servers === undefined) {
    throw new McpConfigError(`${source} has no "mcpServers" (or VS Code's "servers") field; write it like ${EXAMPLE}`, {
      field: "mcpServers",
    });
  }
  const entries: [string, unknown][] = [];
  for (const field of ["mcpServers", "servers"] as const) {
    const servers = value[field];
    if (servers === undefined) continue;
    if (!isRecord(servers)) {
      throw new McpConfigError(`${source}: "${field}" must be an object of servers by name, got ${describe(servers)}`, {
        field,
      });
    }
    for (const [name, entry] of Object.entries(servers)) {
      if (entries.some(([other]) => other === name)) {
        throw new McpConfigError(`${source}: server ${JSON.stringify(name)} is in both "mcpServers" and "servers"`, {
          server: name,
        });
      }
      entries.push([name, entry]);
    }
  }
  const baseDir = options.baseDir ?? process.cwd();
  const globalReadOnly = readBoolean(value.readOnly, source, undefined, "readOnly") ?? false;
  const specs: McpServerSpec[] = [];
  const prefixes = new Map<string, string>();
  for (const [name, entry] of entries) {
    const where = `${source}: server ${JSON.stringify(name)}`;
    if (name.trim() === "") throw new McpConfigError(`${source}: a server has an empty name`, { server: name });
    if (!isRecord(entry)) {
      throw new McpConfigError(`${where} must be an object with "command" or "url", got ${describe(entry)}`, {
        server: name,
      });
    }
    if (readBoolean(entry.disabled, where, name, "disabled") === true) {
      warnings.push(`${where} is disabled and left out`);
      continue;
    }
    const spec = parseServer(name, entry, where, env, warnings, baseDir);
    if (globalReadOnly || options.readOnly === true) spec.readOnly = true;
    const other = prefixes.get(spec.prefix);
    if (other !== undefined) {
      throw new McpConfigError(
        `${where}: its tools would be named ${spec.prefix}__<tool>, like those of server ${JSON.stringify(other)}; rename one of them`,
        { server: name },
      );
    }
    prefixes.set(spec.prefix, name);
    specs.push(spec);
  }
  if (specs.length === 0) warnings.push(`${source}: no servers are configured`);
  return { servers: specs, warnings };
}

function parseServer(
  name: string,
  entry: Record<string, unknown>,
  where: string,
  env: Readonly<Record<string, string | undefined>>,
  warnings: string[],
  baseDir: string,
): McpServerSpec {
  const fail = (field: string, message: string): never => {
    throw new McpConfigError(`${where}: ${message}`, { server: name, field });
  };
  const type = entry.type;
  if (type !== undefined && typeof type !== "string") fail("type", `"type" must be a string, got ${describe(type)}`);
  if (type === "sse") {
    fail("type", `"type": "sse" is not supported: Airlock speaks stdio ("command") and Streamable HTTP ("url")`);
  }
  if (typeof type === "string" && type !== "stdio" && !HTTP_TYPES.has(type)) {
    fail("type", `"type" must be "stdio" or "http", got ${JSON.stringify(type)}`);
  }
  const hasCommand = entry.command !== undefined;
  const hasUrl = entry.url !== undefined;
  if (hasCommand && hasUrl) fail("command", `has both "command" and "url"; give "command" (stdio) or "url" (HTTP)`);
  if (!hasCommand && !hasUrl) fail("command", `needs "command" (a stdio server) or "url" (a Streamable HTTP server)`);
  if (type === "stdio" && hasUrl) fail("url", `"type" is "stdio" but it has a "url" instead of a "command"`);
  if (typeof type === "string" && HTTP_TYPES.has(type) && hasCommand) {
    fail("command", `"type" is ${JSON.stringify(type)} but it has a "command" instead of a "url"`);
  }
  const known = hasCommand ? STDIO_FIELDS : HTTP_FIELDS;
  for (const key of Object.keys(entry)) {
    if (known.has(key)) continue;
    refuseNearMiss(key, known, where, name);
    warnings.push(`${where}: unknown field "${key}" ignored`);
  }
  const expand = (field: string, text: string) =>
    expandVariables(text, env, baseDir, (variable, problem) =>
      fail(
        field,
        problem === "input"
          ? `"${field}" uses \${${variable}}, an input VS Code prompts for; Airlock does not prompt: set an environment variable and write \${env:NAME}`
          : problem === "unknown"
            ? `"${field}" uses \${${variable}}, which Airlock does not know (it expands \${NAME}, \${env:NAME}, \${userHome} and \${workspaceFolder})`
            : `"${field}" uses \${${variable}}, which is not set in the environment (write \${${variable}:-default} for a default)`,
      ),
    );
  const base = {
    name,
    prefix: serverPrefix(name),
    allow: parseAllow(entry.tools, fail),
    readOnly: readBoolean(entry.readOnly, where, name, "readOnly") ?? false,
    approval: parseApproval(entry.approval, fail),
  };
  if (hasCommand) {
    const command = entry.command;
    if (typeof command !== "string" || command.trim() === "") {
      fail("command", `"command" must be a non-empty string, got ${describe(command)}`);
    }
    const args = entry.args ?? [];
    if (!Array.isArray(args)) fail("args", `"args" must be an array of strings, got ${describe(args)}`);
    (args as unknown[]).forEach((arg, i) => {
      if (typeof arg !== "string") fail(`args[${i}]`, `"args[${i}]" must be a string, got ${describe(arg)}`);
    });
    const cwd = entry.cwd;
    if (cwd !== undefined && (typeof cwd !== "string" || cwd === "")) {
      fail("cwd", `"cwd" must be a non-empty string, got ${describe(cwd)}`);
    }
    const envFile = entry.envFile;
    if (envFile !== undefined && (typeof envFile !== "string" || envFile === "")) {
      fail("envFile", `"envFile" must be a non-empty string, got ${describe(envFile)}`);
    }
    const fromFile =
      envFile === undefined ? {} : readEnvFile(resolve(baseDir, expand("envFile", envFile as string)), fail);
    const expandedCwd = cwd === undefined ? undefined : expand("cwd", cwd as string);
    return {
      ...base,
      transport: "stdio",
      command: expand("command", command as string),
      args: (args as string[]).map((arg, i) => expand(`args[${i}]`, arg)),
      env: { ...fromFile, ...stringMap(entry.env, "env", fail, expand) },
      cwd: expandedCwd === undefined || isAbsolute(expandedCwd) ? expandedCwd : resolve(baseDir, expandedCwd),
    };
  }
  const rawUrl = entry.url;
  if (typeof rawUrl !== "string" || rawUrl === "")
    fail("url", `"url" must be a non-empty string, got ${describe(rawUrl)}`);
  const text = expand("url", rawUrl as string);
  let url: URL | undefined;
  try {
    url = new URL(text);
  } catch {
    fail("url", `"url" is not a valid URL: ${JSON.stringify(text)}`);
  }
  if (url && url.protocol !== "http:" && url.protocol !== "https:") {
    fail("url", `"url" must be an http: or https: URL, got ${JSON.stringify(text)}`);
  }
  return { ...base, transport: "http", url: url as URL, headers: stringMap(entry.headers, "headers", fail, expand) };
}

function parseAllow(value: unknown, fail: (field: string, message: string) => never): string[] | null {
  if (value === undefined || value === "*") return null;
  if (!Array.isArray(value)) fail("tools", `"tools" must be "*" or an array of tool names, got ${describe(value)}`);
  const names = value as unknown[];
  names.forEach((name, i) => {
    if (typeof name !== "string" || name === "") {
      fail(`tools[${i}]`, `"tools[${i}]" must be a tool name (a non-empty string), got ${describe(name)}`);
    }
  });
  return [...new Set(names as string[])];
}

function parseApproval(value: unknown, fail: (field: string, message: string) => never): "always" | "never" | string[] {
  if (value === undefined || value === "never") return "never";
  if (value === "always") return "always";
  if (!Array.isArray(value)) {
    fail(
      "approval",
      `"approval" must be "always", "never" or an array of tool names (whose calls a person approves), got ${describe(value)}`,
    );
  }
  const names = value as unknown[];
  names.forEach((name, i) => {
    if (typeof name !== "string" || name === "") {
      fail(`approval[${i}]`, `"approval[${i}]" must be a tool name (a non-empty string), got ${describe(name)}`);
    }
  });
  return [...new Set(names as string[])];
}

function stringMap(
  value: unknown,
  field: string,
  fail: (field: string, message: string) => never,
  expand: (field: string, text: string) => string,
): Record<string, string> {
  if (value === undefined) return {};
  if (!isRecord(value)) fail(field, `"${field}" must be an object of strings, got ${describe(value)}`);
  const out: Record<string, string> = {};
  for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
    const path = `${field}.${key}`;
    if (typeof item !== "string") fail(path, `"${path}" must be a string, got ${describe(item)}`);
    out[key] = expand(path, item as string);
  }
  return out;
}

function readBoolean(value: unknown, where: string, server: string | undefined, field: string): boolean | undefined {
  if (value === undefined || typeof value === "boolean") return value;
  throw new McpConfigError(`${where}: "${field}" must be true or false, got ${describe(value)}`, {
    ...(server === undefined ? {} : { server }),
    field,
  });
}

/**
 * `${NAME}`, `${NAME:-default}` and `${env:NAME}` from `env`, `${userHome}` and `${workspaceFolder}`; `$${` stays a
 * literal `${`. VS Code's `${input:id}` and other names are refused through `problem`.
 */
function expandVariables(
  text: string,
  env: Readonly<Record<string, string | undefined>>,
  baseDir: string,
  problem: (name: string, why: "unset" | "input" | "unknown") => never,
): string {
  const expand = (name: string, fallback: string | undefined): string => {
    if (name === "userHome") return homedir();
    if (name === "workspaceFolder") return baseDir;
    const colon = name.indexOf(":");
    if (colon !== -1) {
      const scheme = name.slice(0, colon);
      if (scheme === "input") return problem(name, "input");
      if (scheme !== "env") return problem(name, "unknown");
    }
    const variable = colon === -1 ? name : name.slice(colon + 1);
    const value = env[variable];
    if (value !== undefined && value !== "") return value;
    if (fallback !== undefined) return fallback;
    return problem(name, "unset");
  };
  // What `/\$(\$?)\{(NAME)(?::-([^}]*))?\}/g` replaces, found in one pass: a reference ends at the first `}` after
  // its `${`, so each is read between the two (that pattern alone tried every `${` up to the text's end: a value of
  // 40,000 `${a:-` took a minute).
  let out = "";
  let copied = 0;
  let close = -1;
  for (let at = text.indexOf("${"); at !== -1; at = text.indexOf("${", at + 1)) {
    if (close < at) close = text.indexOf("}", at);
    if (close === -1) break;
    const reference = VARIABLE_REFERENCE.exec(text.slice(at + 2, close));
    if (reference === null) continue;
    const literal = text[at - 1] === "$" && at - 1 >= copied;
    const start = literal ? at - 1 : at;
    out +=
      text.slice(copied, start) + (literal ? text.slice(at, close + 1) : expand(reference[1] as string, reference[2]));
    copied = close + 1;
    at = close;
  }
  return out + text.slice(copied);
}

/** The inside of a `${...}` reference: a name (`env:NAME` and the like), then an optional `:-default`. */
const VARIABLE_REFERENCE = /^([A-Za-z_][A-Za-z0-9_]*(?::[^}:-][^}:]*)?)(?::-([^}]*))?$/;

/** A dotenv file: `NAME=value` lines (optionally `export NAME=value`), `#` comments, values optionally quoted. */
function readEnvFile(path: string, fail: (field: string, message: string) => never): Record<string, string> {
  let text: string;
  try {
    const bytes = readFileSync(path);
    if (bytes.length > MAX_ENV_FILE_BYTES)
      fail("envFile", `"envFile" ${path} is larger than ${MAX_ENV_FILE_BYTES} bytes`);
    text = bytes.toString("utf8");
  } catch (error) {
    const { code, message } = error as NodeJS.ErrnoException;
    return fail(
      "envFile",
      code === "ENOENT" ? `"envFile" ${path} does not exist` : `cannot read "envFile" ${path}: ${message}`,
    );
  }
  const out: Record<string, string> = {};
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) return;
    const match = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/.exec(line);
    if (match === null) fail("envFile", `"envFile" ${path}, line ${i + 1}: not NAME=value`);
    const [, key, rawValue] = match as RegExpExecArray;
    let value = rawValue as string;
    const quote = value[0];
    if ((quote === '"' || quote === "'") && value.length >= 2 && value.endsWith(quote)) {
      value = value.slice(1, -1);
      if (quote === '"') value = value.replace(/\\n/g, "\n").replace(/\\(["\\])/g, "$1");
    } else {
      // A comment starts at a `#` after whitespace (found in one pass: `/\s+#.*$/` tried every space of a long run).
      const comment = value.search(/\s#/);
      if (comment !== -1) value = value.slice(0, comment).trimEnd();
    }
    Object.defineProperty(out, key as string, { value, enumerable: true, writable: true, configurable: true });
  });
  return out;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (value === undefined) return "nothing";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "string") return `the string ${JSON.stringify(value)}`;
  if (typeof value === "object") return "an object";
  return `${typeof value} ${String(value)}`;
}
