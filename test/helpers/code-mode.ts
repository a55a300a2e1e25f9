import { type AirlockError, defineTool, z } from "airlock-codemode";
import type { CodeProgramLimits } from "airlock-codemode/code-mode";

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

/** A program's limits, roomy for a test: 500 ms of CPU, 10 s of wall time, 16 MiB, 1 KiB boundaries, 4 calls. */
export function testLimits(overrides: Partial<CodeProgramLimits> = {}): CodeProgramLimits {
  return {
    cpuMillis: 500,
    wallTimeMillis: 10_000,
    memoryBytes: 16 * 1024 * 1024,
    scratchBytes: 0,
    maxInputBytes: 1_024,
    maxOutputBytes: 1_024,
    maxToolInputBytes: 1_024,
    maxToolCalls: 4,
    maxToolConcurrency: 1,
    ...overrides,
  };
}

/** The error `define()` throws (a refused definition), or undefined when it defines. */
export function refusalOf(define: () => unknown): AirlockError | undefined {
  try {
    define();
    return undefined;
  } catch (error) {
    return error as AirlockError;
  }
}
