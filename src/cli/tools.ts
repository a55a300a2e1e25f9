/** The `--tools` module: a JS module whose default export is an array of tools. */
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import type { CodemodeTool } from "../index.ts";
import { checkNewTool } from "../sandbox/base.ts";
import { UsageError } from "./args.ts";

/** Imports the module at `spec` (relative to `cwd`) and checks the shape of its default export. */
export async function loadTools(spec: string, cwd: string): Promise<CodemodeTool[]> {
  const path = resolve(cwd, spec);
  if (!existsSync(path)) throw new UsageError(`--tools: module not found: ${spec} (looked for ${path})`);
  // Once nothing is left to run (no timer, no I/O), a top-level await that has not settled never will, and Node
  // would exit with status 13 and no message; "beforeExit" is emitted exactly then.
  let stuck = () => {};
  const neverSettles = new Promise<never>((_, reject) => {
    stuck = () => reject(new Error("its top-level await never settles"));
  });
  process.once("beforeExit", stuck);
  let module: { default?: unknown };
  try {
    module = await Promise.race([import(pathToFileURL(path).href), neverSettles]);
  } catch (error) {
    throw new UsageError(`--tools ${spec}: the module failed to load: ${(error as Error)?.message ?? String(error)}`);
  } finally {
    process.off("beforeExit", stuck);
  }
  const list = module.default;
  if (list === undefined) {
    throw new UsageError(`--tools ${spec}: the module has no default export; export default an array of tools`);
  }
  if (!Array.isArray(list)) {
    throw new UsageError(`--tools ${spec}: the default export must be an array of tools, got ${describe(list)}`);
  }
  const ids = new Map<string, string>();
  list.forEach((tool: unknown, index) => {
    const entry = `--tools ${spec}: entry ${index}`;
    if (tool === null || typeof tool !== "object") throw new UsageError(`${entry} is ${describe(tool)}, not a tool`);
    const { name, execute, description } = tool as Partial<Record<keyof CodemodeTool, unknown>>;
    if (typeof name !== "string" || name === "") throw new UsageError(`${entry} has no name (a non-empty string)`);
    if (typeof execute !== "function") throw new UsageError(`${entry} ("${name}") has no execute function`);
    if (description !== undefined && typeof description !== "string") {
      throw new UsageError(`${entry} ("${name}") has a description that is not a string`);
    }
    // The sandbox's own checks (duplicate names, names that would be the same tools.<name>), for every command.
    try {
      ids.set(checkNewTool(tool as CodemodeTool, ids), name);
    } catch (error) {
      throw new UsageError(`--tools ${spec}: ${(error as Error).message}`);
    }
  });
  return list as CodemodeTool[];
}

function describe(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}
