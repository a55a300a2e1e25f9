import { defineTool, z } from "airlock-codemode";

/** A read tool `echo` that returns its `{ value }` input, at `costMicros` per call. */
export function echoTool(costMicros: number) {
  return defineTool({
    id: "echo",
    version: "1",
    description: "Returns its input.",
    input: z.object({ value: z.unknown() }),
    output: z.object({ value: z.unknown() }),
    effects: "read",
    capabilities: [],
    costMicros,
    execute: ({ value }) => ({ value }),
  });
}
