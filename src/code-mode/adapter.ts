/**
 * Sandbox adapters: where a program runs. `defineSandboxAdapter` wraps any sandbox; Airlock's own adapters
 * (`airlock-codemode/adapter-code-quickjs`) are made the same way. The executor accepts only adapters made here.
 */
import type { JsonValue } from "../json/index.ts";
import { optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import type { ErrorCode, FailureStatus } from "../tools/errors.ts";
import { CONFIG_OPTION_ERRORS, configError } from "../tools/errors.ts";
import { checkId, checkName } from "../tools/validate.ts";
import { CODE_LANGUAGES, type CodeLanguage, type CodeProgramLimits } from "./program.ts";

/**
 * `production`: the sandbox meets guarantees its author documented and tested; `createCodeMode` accepts it.
 * `test`: for fixtures and experiments; `createCodeMode` refuses it (UNSUPPORTED_PROFILE) unless `allowTestAdapter`.
 */
export type SandboxQualification = "production" | "test";

export type SandboxFailureReason =
  | "program_error"
  | "cpu_limit"
  | "memory_limit"
  | "invalid_output"
  | "unsupported_program"
  | "sandbox_error";

export const SANDBOX_FAILURE_REASONS: readonly SandboxFailureReason[] = Object.freeze([
  "program_error",
  "cpu_limit",
  "memory_limit",
  "invalid_output",
  "unsupported_program",
  "sandbox_error",
]);

/** What a program's `tools.call(toolId, input)` resolves to. It never rejects for a tool failure. */
export type ToolCallResult =
  | { readonly status: "succeeded"; readonly output: JsonValue }
  | { readonly status: FailureStatus; readonly error: { readonly code: ErrorCode; readonly message: string } };

/** The program as a sandbox sees it. */
export interface SandboxProgram {
  readonly id: string;
  readonly version: string;
  readonly digest: string;
  readonly language: CodeLanguage;
  /** As written, in `language`. */
  readonly source: string;
  /**
   * The source as JavaScript: `source` itself, or a TypeScript program's source with its types erased in place
   * (lines and columns kept). An adapter that declares `typescript` among its `languages` may run this.
   */
  readonly javascript: string;
  /** Bare package specifiers the program may import; a sandbox that cannot provide them answers `unsupported_program`. */
  readonly approvedImports: readonly string[];
  readonly limits: CodeProgramLimits;
}

export interface SandboxToolsBridge {
  /**
   * Makes a tool call for the program. `input` is what the program passed (any value; the executor checks it). The
   * optional signal cancels the call; every call is cancelled when the execution ends.
   */
  call(toolId: string, input: unknown, signal?: AbortSignal): Promise<ToolCallResult>;
}

/** A call's result with its place in a replayable run: applied as result `seq`, with the clock moved to `now`. */
export interface SequencedCallResult {
  readonly result: ToolCallResult;
  readonly seq: number;
  readonly now: number;
}

/**
 * Set on requests to adapters that declare `deterministic: true`: run the program so that it can be replayed. Its
 * clock starts at `startedAt` and moves only to the `now` of each result, its randomness comes from `seed`, and the
 * results of its calls (made through `call` here, not `tools.call`) are applied in `seq` order.
 */
export interface SandboxDeterministicRun {
  readonly startedAt: number;
  readonly seed: number;
  call(toolId: string, input: unknown): Promise<SequencedCallResult>;
  /** Told the engine's fingerprint before the program runs: a replay must run on the same engine. */
  onFingerprint?(fingerprint: string): void;
  /**
   * Results of the program's first calls, known before it runs (a resume's journaled calls): result i answers call
   * i + 1. A sandbox may apply them without waiting on `call`, but still makes `call` for every call, in order: that
   * checks the call against the journal, and stops the run (its signal aborts) on the first that differs.
   */
  readonly answered?: readonly SequencedCallResult[];
  /**
   * Given to an adapter that declares `snapshots`: once `signal` aborts, capture the run where it waits on its calls
   * and hand it to `done` (null when it cannot: too large, or not on this build), then go on running; the request's
   * own signal ends the run.
   */
  readonly capture?: { readonly signal: AbortSignal; done(snapshot: SandboxSnapshot | null): void };
  /**
   * Given to an adapter that declares `snapshots`: a run captured before. Continue it from there if this sandbox can
   * (the same build as `snapshot.key` names), and say so with `onRestored(true)` before the first `call`; then make
   * `call` for the calls open at the capture (`snapshot.open`, in order) and then for new calls, which number on from
   * `snapshot.calls + 1`, and leave `answered` unused. Otherwise `onRestored(false)`, and run the program from its start.
   */
  readonly restore?: { readonly snapshot: SandboxSnapshot; onRestored(restored: boolean): void };
}

/**
 * A run captured where it waited on its calls (see SandboxDeterministicRun.capture): which build can continue it, the
 * calls it had made and those still open, and the sandbox's own bytes of it, which the caller keeps without reading.
 */
export interface SandboxSnapshot {
  readonly key: string;
  readonly calls: number;
  readonly open: readonly number[];
  readonly data: Uint8Array;
}

export interface SandboxExecuteRequest {
  readonly program: SandboxProgram;
  /** The validated input, and the same as JSON text. */
  readonly input: JsonValue;
  readonly inputJson: string;
  readonly tools: SandboxToolsBridge;
  /** Aborts when the execution ends early (wall time, the caller's signal, a limit); stop the program then. */
  readonly signal: AbortSignal;
  readonly deterministic?: SandboxDeterministicRun;
}

export interface ProgramErrorInfo {
  readonly name: string;
  readonly message: string;
}

/**
 * A sandbox's answer, as plain data with exactly these fields. On success, give the output as a value or, if the
 * sandbox has it as JSON text, as `outputJson` (its size is then checked before it is parsed). On failure, give a
 * reason and, when the program itself threw, `programError` (two strings; kept only with `program_error`). Anything
 * else (an unknown reason, another field, a getter, a success that also gives a reason) is read as a failed sandbox.
 */
export type SandboxResult =
  | { readonly status: "succeeded"; readonly output: unknown }
  | { readonly status: "succeeded"; readonly outputJson: string }
  | {
      readonly status: "failed";
      readonly reason?: SandboxFailureReason;
      readonly programError?: ProgramErrorInfo;
    };

export interface SandboxAdapterDefinition {
  id: string;
  version: string;
  qualification: SandboxQualification;
  /** Whether the sandbox can run programs now. An unavailable adapter fails the execution; nothing runs on the host. */
  isAvailable(): boolean | Promise<boolean>;
  execute(request: SandboxExecuteRequest): Promise<SandboxResult>;
  /**
   * The program languages the sandbox runs; default `["javascript"]`. A program in another language is
   * UNSUPPORTED_PROFILE when it is executed and never reaches `execute`. A sandbox that runs JavaScript can declare
   * `typescript` too and run `program.javascript`, whose types Airlock erased.
   */
  languages?: readonly CodeLanguage[];
  /** The adapter honours `request.deterministic` (needed for single-call approvals). Default false. */
  deterministic?: boolean;
  /**
   * The adapter also honours `request.deterministic.capture` and `.restore`: single-call approvals then resume a
   * program with a long journal from a snapshot of its paused run rather than by replay. Default false.
   */
  snapshots?: boolean;
}

export interface SandboxAdapter {
  readonly kind: "airlock.sandbox-adapter";
  readonly id: string;
  readonly version: string;
  readonly qualification: SandboxQualification;
  readonly languages: readonly CodeLanguage[];
  readonly deterministic: boolean;
  readonly snapshots: boolean;
  isAvailable(): boolean | Promise<boolean>;
  execute(request: SandboxExecuteRequest): Promise<SandboxResult>;
}

/**
 * Why one of Airlock's own adapters cannot run programs now, in Airlock's own words (a promotion that expired, an
 * image that does not verify), or undefined when it can. The executor puts the reason in its UNSUPPORTED_PROFILE
 * message; an adapter of your own only answers `isAvailable()` (its text is not Airlock's).
 */
export type AvailabilityCheck = () => Promise<string | undefined>;

const ADAPTER_DEFINITION_KEYS = optionKeys<SandboxAdapterDefinition>({
  id: true,
  version: true,
  qualification: true,
  isAvailable: true,
  execute: true,
  languages: true,
  deterministic: true,
  snapshots: true,
});

const JAVASCRIPT_ONLY: readonly CodeLanguage[] = Object.freeze(["javascript"]);

const adapters = new WeakSet<object>();
const availabilityChecks = new WeakMap<object, AvailabilityCheck>();

/** True only for adapters made by `defineSandboxAdapter` or Airlock's own adapter factories. */
export function isSandboxAdapter(value: unknown): value is SandboxAdapter {
  return typeof value === "object" && value !== null && adapters.has(value);
}

/** The availability check of one of Airlock's own adapters that can say why it is unavailable. */
export function availabilityCheckOf(adapter: SandboxAdapter): AvailabilityCheck | undefined {
  return availabilityChecks.get(adapter);
}

/** Wraps a sandbox of your own. Declare `production` only for a sandbox whose guarantees you documented and tested. */
export function defineSandboxAdapter(definition: SandboxAdapterDefinition): SandboxAdapter {
  return makeSandboxAdapter(definition, {});
}

/** Airlock's own factories add their extra members (such as `close()`) here, and a check that says why not. */
export function makeSandboxAdapter<X extends object>(
  definition: SandboxAdapterDefinition,
  extra: X,
  check?: AvailabilityCheck,
): SandboxAdapter & X {
  if (typeof definition !== "object" || definition === null) {
    throw configError("defineSandboxAdapter needs { id, version, qualification, isAvailable, execute }");
  }
  refuseUnknownOptions(definition, "defineSandboxAdapter", ADAPTER_DEFINITION_KEYS, CONFIG_OPTION_ERRORS, "field");
  const id = checkId(definition.id, "adapter id");
  const version = checkName(definition.version, "adapter version");
  const { qualification, isAvailable, execute } = definition;
  if (qualification !== "production" && qualification !== "test") {
    throw configError("adapter qualification must be 'production' or 'test'");
  }
  if (typeof isAvailable !== "function") throw configError("adapter isAvailable must be a function");
  if (typeof execute !== "function") throw configError("adapter execute must be a function");
  const languages = checkLanguages(definition.languages);
  const deterministic = definition.deterministic ?? false;
  if (typeof deterministic !== "boolean") throw configError("adapter deterministic must be a boolean");
  const snapshots = definition.snapshots ?? false;
  if (typeof snapshots !== "boolean") throw configError("adapter snapshots must be a boolean");
  if (snapshots && !deterministic) throw configError("adapter snapshots needs deterministic: true");
  const adapter = Object.freeze({
    ...extra,
    kind: "airlock.sandbox-adapter" as const,
    id,
    version,
    qualification,
    languages,
    deterministic,
    snapshots,
    isAvailable: () => isAvailable.call(definition),
    execute: (request: SandboxExecuteRequest) => execute.call(definition, request),
  });
  adapters.add(adapter);
  if (check !== undefined) availabilityChecks.set(adapter, check);
  return adapter;
}

function checkLanguages(value: unknown): readonly CodeLanguage[] {
  if (value === undefined) return JAVASCRIPT_ONLY;
  // Copied once, then checked: what is checked is what is kept.
  const languages: unknown[] = Array.isArray(value) && value.length <= CODE_LANGUAGES.length ? [...value] : [];
  if (
    languages.length === 0 ||
    new Set(languages).size !== languages.length ||
    !languages.every((language) => CODE_LANGUAGES.includes(language as CodeLanguage))
  ) {
    throw configError("adapter languages must list 'javascript', 'typescript' or both, each once");
  }
  return Object.freeze(languages as CodeLanguage[]);
}
