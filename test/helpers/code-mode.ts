import { defineTool, z } from "airlock-codemode";

/**
 * The definition of a read tool `echo` that returns its `{ value }` input, at `costMicros` per call. A tool carries no
 * handler, so tests derive tools from this definition (`defineTool({ ...echoDefinition(0), id: "other" })`).
 */
export function echoDefinition(costMicros: number) {
  return {
    id: "echo",
    version: "1",
    description: "Returns its input.",
    input: z.object({ value: z.unknown() }),
    output: z.object({ value: z.unknown() }),
    effects: "read" as const,
    capabilities: [] as string[],
    costMicros,
    execute: ({ value }: { value?: unknown }) => ({ value }),
  };
}

/** The tool `echo` of `echoDefinition`. */
export function echoTool(costMicros: number) {
  return defineTool(echoDefinition(costMicros));
}
