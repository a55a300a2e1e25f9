/**
 * Shared fixtures of the Mayura compatibility suite: Mayura's test cases (packages code-mode, adapter-code-quickjs,
 * adapter-code-docker, tools and core of KartikeyAI/mayura), ported in our own words. Every adapter that claims a
 * behaviour runs it:
 * - the QuickJS worker adapter (a worker pool of this process);
 * - the QuickJS protocol adapter over a real child process speaking the protocol on stdio;
 * - the Docker adapter, against a recording stand-in for the docker CLI: no Docker engine runs on this machine, so
 *   the stand-in plays the CLI and serves the container entry from an image root that `writeDockerBuildContext`
 *   wrote, as the container would run it. The real-engine test is in test/docker.test.ts.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type AnyTool, defineTool, z } from "airlock-codemode";
import {
  CONTAINER_ENTRY,
  CONTAINER_ROOT,
  createDockerQuickJsSandboxAdapter,
  writeDockerBuildContext,
} from "airlock-codemode/adapter-code-docker";
import {
  type ClosableSandboxAdapter,
  createQuickJsProtocolAdapter,
  createQuickJsSandboxAdapter,
} from "airlock-codemode/adapter-code-quickjs";
import {
  type CodeExecutionOutcome,
  type CodeMode,
  type CodeProgramDefinition,
  type CodeProgramLimits,
  defineCodeProgram,
} from "airlock-codemode/code-mode";
import { GOOD_IMAGE, STAND_IN_IMAGE, STAND_IN_PROVENANCE, standInFolder } from "../../helpers/docker-stand-in.ts";
import { launchVmSideChild } from "../../helpers/vm-side.ts";

export const SCOPE = Object.freeze({ principalId: "alice", projectId: "project-a" });

/** Mayura's fixture limits for adapter tests: small, so that a hostile program meets them quickly. */
export const LIMITS: CodeProgramLimits = Object.freeze({
  cpuMillis: 500,
  wallTimeMillis: 8_000,
  memoryBytes: 16 * 1024 * 1024,
  scratchBytes: 1_024,
  maxInputBytes: 4_096,
  maxOutputBytes: 4_096,
  maxToolInputBytes: 4_096,
  maxToolCalls: 4,
  maxToolConcurrency: 2,
});

/** Mayura's pure tool: doubles `value`. Its effects are `none`, so it needs only `tool:number.double`. */
export const double = defineTool({
  id: "number.double",
  version: "1.0.0",
  description: "Double a number.",
  effects: "none",
  capabilities: [],
  input: z.object({ value: z.number() }),
  output: z.object({ value: z.number() }),
  costMicros: 1,
  execute: ({ value }) => ({ value: value * 2 }),
});

export type ProgramOverrides = Partial<Omit<CodeProgramDefinition<z.ZodType, z.ZodType>, "limits">> & {
  limits?: Partial<CodeProgramLimits>;
};

/** A program of any input and output, with the fixture limits and `overrides`. */
export function program(source: string, overrides: ProgramOverrides = {}) {
  const { limits, ...rest } = overrides;
  return defineCodeProgram({
    id: "compat.program",
    version: "1",
    intent: "A Mayura compatibility case.",
    language: "javascript",
    source,
    input: z.unknown(),
    output: z.unknown(),
    inputSchemaId: "any.input.v1",
    outputSchemaId: "any.output.v1",
    tools: [] as AnyTool[],
    ...rest,
    limits: { ...LIMITS, ...limits },
  });
}

let sequence = 0;
/** Execute options with a new execution id each time, and a signal (execute needs one). */
export function options(signal: AbortSignal = new AbortController().signal, executionId = `compat-${++sequence}`) {
  return { runId: "run-1", executionId, scope: SCOPE, signal };
}

export function codeOf(outcome: CodeExecutionOutcome<unknown>): string {
  return outcome.status === "succeeded" ? "OK" : outcome.error.code;
}

/** Runs `source` on `mode` with input `{ value: 3 }`. */
export function execute(
  mode: CodeMode,
  source: string,
  overrides: ProgramOverrides = {},
  signal?: AbortSignal,
): Promise<CodeExecutionOutcome<unknown>> {
  return mode.execute(program(source, overrides), { value: 3 }, options(signal));
}

export interface CompatAdapter {
  readonly name: string;
  /** Whether the adapter is qualified `production` (else the suite passes allowTestAdapter). */
  readonly production: boolean;
  make(): ClosableSandboxAdapter;
}

/** The Docker stand-in and the image root it serves from, made on first use and removed by `cleanUp()`. */
let docker: { standIns: ReturnType<typeof standInFolder>; context: string; path: string } | undefined;

function dockerStandInAdapter(): ClosableSandboxAdapter {
  if (docker === undefined) {
    const context = mkdtempSync(join(tmpdir(), "airlock-image-"));
    const { root } = writeDockerBuildContext(context);
    const standIns = standInFolder();
    // The stand-in runs the entry where the image keeps it, inside the root the build context holds.
    const entry = join(root, CONTAINER_ENTRY.slice(CONTAINER_ROOT.length + 1));
    docker = { standIns, context, path: standIns.make(GOOD_IMAGE, entry).path };
  }
  return createDockerQuickJsSandboxAdapter({
    dockerPath: docker.path,
    image: STAND_IN_IMAGE,
    provenance: STAND_IN_PROVENANCE,
  });
}

/** Removes the Docker stand-in's files, if they were made. */
export function cleanUp(): void {
  if (docker === undefined) return;
  docker.standIns.remove();
  rmSync(docker.context, { recursive: true, force: true });
  docker = undefined;
}

/** Every adapter that claims the QuickJS behaviours of Mayura's adapter suite. */
export const ADAPTERS: readonly CompatAdapter[] = [
  { name: "QuickJS worker", production: true, make: () => createQuickJsSandboxAdapter({ poolSize: 2 }) },
  {
    name: "QuickJS protocol over a child process",
    production: false,
    make: () => createQuickJsProtocolAdapter({ id: "compat.child", version: "1", launch: () => launchVmSideChild() }),
  },
  {
    name: "Docker, against a recording stand-in for the CLI (no Docker engine here)",
    production: true,
    make: dockerStandInAdapter,
  },
];
