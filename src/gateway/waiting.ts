/**
 * Runs that wait for a person: what `execute` does with a call that needs approval when its client cannot be asked
 * (no MCP elicitation) and the gateway has a durable store (`airlock serve --store`). Such a run goes through code
 * mode's single-call approvals (code-mode/approvals/call-approvals.ts and its parts), with the sandbox's deterministic script runs (`start()`) as
 * its adapter: every call is journaled in the store before it is sent and marked with its result after, and at a call
 * that needs approval the run stops and `execute` answers that it waits, with its id and the `airlock approve` and
 * `airlock reject` lines. Called again with the same code and `resume: <id>`, the script runs again from the start and
 * every journaled call is answered from the journal, so nothing that was sent is sent again; the approved call is sent
 * then, a rejected one rejects in the script with GUARD_BLOCKED, and code that does not replay the journal is
 * INTEGRITY_VIOLATION with nothing sent.
 */
import { randomUUID } from "node:crypto";
import { makeSandboxAdapter, type SandboxExecuteRequest, type ToolCallResult } from "../code-mode/adapter.ts";
import type { AttemptOutcome, WaitingOutcome } from "../code-mode/approvals/attempt-outcome.ts";
import { type CallApprovals, createCallApprovals } from "../code-mode/approvals/call-approvals.ts";
import {
  type ApprovalJournalStore,
  type CallJournalView,
  type JournaledProgram,
  type JournaledTool,
  readCallJournal,
} from "../code-mode/approvals/call-journal.ts";
import { MAX_BOUNDARY_BYTES } from "../code-mode/program.ts";
import { domainDigest, MAX_JSON_BYTES, tryCopyJson } from "../json/index.ts";
import type { CodemodeSandboxBase } from "../sandbox/base.ts";
import type { Scope } from "../tools/define.ts";
import { AirlockError, type ErrorCode, isErrorCode, statusOf } from "../tools/errors.ts";
import type { CodemodeOutcome, CodemodeResult, CodemodeRun, CodemodeTool } from "../types.ts";
import { JOURNAL_DECIDED } from "../upstream/approval.ts";
import type { McpTool } from "../upstream/toolset.ts";
import type { McpToolResult } from "./output.ts";

/** Whose journals the gateway keeps when no scope is given: a person approving must belong to project "airlock". */
export const DEFAULT_GATEWAY_SCOPE: Scope = Object.freeze({ principalId: "airlock-gateway", projectId: "airlock" });
/** A run's id: `gw-` and a UUID. */
const RUN_ID = /^gw-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** Prefix of a global's id in the journal (`global:search`), so that no tool name can take it. */
const GLOBAL_PREFIX = "global:";

/** One decision a person makes on a waiting call, for the command line the answer shows. */
export interface WaitingDecision {
  verdict: "approve" | "reject";
  /** The run's id, as `airlock approve` takes it. */
  run: string;
  /** `call:<n>`. */
  node: string;
  digest: string;
}

export interface GatewayWaitingOptions {
  /** An initialized workflow store (`createSqliteStore`, `createPostgresStore`); the gateway does not close it. */
  store: ApprovalJournalStore;
  /**
   * Whose journals these are; the person approving must belong to its `projectId` (what `verifyHuman` answers).
   * Default `DEFAULT_GATEWAY_SCOPE`.
   */
  scope?: Scope;
  /** How long a request waits for a person before the run expires. Default `DEFAULT_CALL_APPROVAL_TTL_MS` (1 h). */
  ttlMs?: number;
  /** The command line a person runs to decide (airlock serve gives the exact `airlock approve` line). */
  commandLine?: (decision: WaitingDecision) => string;
}

/** What one waiting-capable run takes. */
export interface WaitingRunInput {
  /** The code as the client sent it: what a resume must send again. */
  code: string;
  /** The script that runs (types stripped). */
  script: string;
  timeoutMs: number;
  /** The session's stored values when the run starts (a resume starts from those its journal kept). */
  values: Record<string, unknown>;
  signal?: AbortSignal;
  sandbox: CodemodeSandboxBase;
  resume?: string;
  /** Who started it (the client's principal): its journal is kept under the scope with `client` set to it. */
  principal?: string;
}

/** The script's own end (to be formatted as any run's), or the gateway's answer instead (waiting, refused). */
export type WaitingRunEnd = { result: CodemodeResult } | { answer: McpToolResult };

/** Checks a `resume` argument: undefined when it is well-formed, else what is wrong. */
export function resumeProblem(resume: unknown): string | undefined {
  if (typeof resume !== "string") return '"resume" must be a string: the id of a waiting run';
  if (!RUN_ID.test(resume)) {
    return `"resume" must be the id of a waiting run as execute gave it (gw- and a UUID), got ${JSON.stringify(resume.slice(0, 80))}`;
  }
  return undefined;
}

export class WaitingRuns {
  readonly scope: Scope;
  private readonly approvals: CallApprovals;
  private readonly commandLine: (decision: WaitingDecision) => string;

  constructor(private readonly options: GatewayWaitingOptions) {
    if (typeof options !== "object" || options === null || typeof options.store?.read !== "function") {
      throw new TypeError("waiting needs { store }: an initialized workflow store");
    }
    const scope = options.scope ?? DEFAULT_GATEWAY_SCOPE;
    if (typeof scope?.principalId !== "string" || typeof scope.projectId !== "string") {
      throw new TypeError("waiting.scope needs a principalId and a projectId (strings)");
    }
    this.scope = Object.freeze({ ...scope });
    // The gateway never decides: people do, with `airlock approve` and their credential.
    this.approvals = createCallApprovals({
      store: options.store,
      verifyHuman: () => {
        throw new Error("the gateway takes no decisions");
      },
      ...(options.ttlMs === undefined ? {} : { ttlMs: options.ttlMs }),
    });
    this.commandLine =
      options.commandLine ??
      (({ verdict, run, node, digest }) =>
        `airlock ${verdict} ${run} ${node} --digest ${digest} --store <the gateway's store> --verifier <a module exporting verifyHuman>`);
  }

  /** Runs (or resumes) one script whose calls that need approval wait for a person. */
  async run(input: WaitingRunInput): Promise<WaitingRunEnd> {
    const { sandbox, resume } = input;
    if (resume !== undefined) {
      const problem = resumeProblem(resume);
      if (problem !== undefined) return { answer: refusal("INVALID_INPUT", problem) };
    }
    const { tools, program } = scriptProgram(input.code, input.timeoutMs, sandbox);
    const id = resume ?? `gw-${randomUUID()}`;
    // A run belongs to the principal that started it: another one's resume finds no such run.
    const scope =
      input.principal === undefined ? this.scope : Object.freeze({ ...this.scope, client: input.principal });
    const context = { runId: id, executionId: id, scope };
    // The session's stored values as the run first saw them: kept in its journal, so that a resume (from any
    // session or process) replays with the very same.
    let start: unknown = input.values;
    /** The approval the run waited on before this resume: the same one again means nobody decided yet. */
    let waitedOn: string | undefined;

    if (resume !== undefined) {
      let journal: CallJournalView | undefined;
      try {
        journal = await readCallJournal(this.options.store, scope, resume);
      } catch {
        return { answer: refusal("STORAGE_UNAVAILABLE", "the gateway's store could not be read") };
      }
      if (journal === undefined) {
        return {
          answer: refusal(
            "NOT_FOUND",
            `no run ${resume} in the gateway's store: resume takes the id of a run that execute said waits`,
          ),
        };
      }
      if (journal.programDigest !== program.digest) {
        return {
          answer: refusal(
            "INTEGRITY_VIOLATION",
            `the code is not the code run ${resume} ran: resume it with exactly the same code; nothing was sent`,
          ),
        };
      }
      start = journal.kept ?? {};
      waitedOn = journal.pending?.digest;
    }
    const values = tryCopyJson(start, { maxBytes: MAX_JSON_BYTES });
    if (!values.ok) {
      return { answer: refusal("INVALID_INPUT", "the session's stored values are not JSON within limits") };
    }
    const canonical = { canonical: values.json.canonical, kept: values.json.value };

    let ran: CodemodeResult | undefined;
    const adapter = scriptAdapter(input, values.json.value as Record<string, unknown>, (result) => {
      ran = result;
    });
    const signal = input.signal ?? new AbortController().signal;
    // The tools' own signal: the client's cancellation and the deadline. A stop at a call that needs approval does
    // not cancel the calls already sent: they finish and are journaled, so that the person decides on a settled past.
    const toolSignal = AbortSignal.any([signal, AbortSignal.timeout(input.timeoutMs)]);
    const attempt = async (wrapped: typeof adapter): Promise<AttemptOutcome> => {
      const request: SandboxExecuteRequest = {
        program: Object.freeze({
          id: "mcp-gateway.script",
          version: "1",
          digest: program.digest,
          language: "javascript",
          source: input.script,
          javascript: input.script,
          approvedImports: Object.freeze([]),
          limits: scriptLimits(input.timeoutMs),
        }),
        input: null,
        inputJson: "null",
        tools: { call: (toolId, toolInput) => callTool(tools, toolId, toolInput, toolSignal) },
        signal,
      };
      const done = await wrapped.execute(request);
      if (done.status === "succeeded") return { status: "succeeded", output: null, usage: {}, evidence: [] };
      return {
        status: "failed",
        error: { code: "TOOL_FAILED", message: "the script failed" },
        usage: {},
        evidence: [],
      };
    };
    const outcome =
      resume === undefined
        ? await this.approvals.execute(program, canonical, context, attempt, adapter)
        : await this.approvals.resume(program, canonical, context, attempt, adapter);
    if (outcome.status === "waiting") {
      const still = resume !== undefined && outcome.approval.digest === waitedOn;
      return { answer: await this.waitingAnswer(outcome, scope, id, tools, still) };
    }
    // The script ran to its own end, success or failure: formatted as any run is.
    if ((outcome.status === "succeeded" || outcome.error.code === "TOOL_FAILED") && ran !== undefined) {
      return { result: ran };
    }
    if (outcome.status === "succeeded") return { answer: refusal("STORAGE_UNAVAILABLE", "the run left no result") };
    if (outcome.error.code === "TIMEOUT" && resume !== undefined && ran === undefined) {
      return {
        answer: refusal(
          "TIMEOUT",
          `the approval request of run ${resume} expired before a person decided; its call was not sent. Run the code again without resume to start over`,
        ),
      };
    }
    return { answer: refusal(outcome.error.code, outcome.error.message) };
  }

  /**
   * The answer of a run that waits: its id, the call, the expiry, and how a person decides. `still`: a resume found
   * the same request undecided (a resume that reached another call waits anew).
   */
  private async waitingAnswer(
    outcome: WaitingOutcome,
    scope: Scope,
    id: string,
    tools: ReadonlyMap<string, CodemodeTool>,
    still: boolean,
  ): Promise<McpToolResult> {
    const { approval } = outcome;
    const journal = await readCallJournal(this.options.store, scope, id).catch(() => undefined);
    const args = journal?.pending?.digest === approval.digest ? journal.pending.input : undefined;
    const n = Number(approval.callId.slice(approval.callId.lastIndexOf(":") + 1));
    const node = `call:${n}`;
    const tool = tools.get(approval.tool) as Partial<McpTool> | undefined;
    const server = tool?.server;
    const toolName = tool?.toolName ?? approval.tool;
    const approve = this.commandLine({ verdict: "approve", run: id, node, digest: approval.digest });
    const reject = this.commandLine({ verdict: "reject", run: id, node, digest: approval.digest });
    const expiresAt = new Date(approval.expiresAt).toISOString();
    const named = server === undefined ? `tools.${approval.tool}` : `tool "${toolName}" of server "${server}"`;
    const lead = still
      ? `Still waiting: nobody has approved or rejected call ${n} of run ${id}, to ${named}, yet. Nothing more was sent.`
      : `The run waits for a person's approval: its call ${n}, to ${named}, needs one, and this MCP client cannot be asked (no elicitation), so that call was not sent. The calls before it ran once; their results are kept.`;
    const text = [
      lead,
      "",
      `Run: ${id}`,
      `Call ${n}: ${named}, with the arguments:`,
      args === undefined ? "(see airlock runs show)" : JSON.stringify(args, null, 2),
      `Arguments digest: ${approval.inputDigest}`,
      `Expires: ${expiresAt}`,
      "",
      "A person approves it with:",
      `  ${approve}`,
      "or rejects it with:",
      `  ${reject}`,
      "",
      `Then call execute again with exactly the same code and "resume": "${id}". The script runs from the start; the calls already sent are answered from the journal and not sent again.`,
    ].join("\n");
    return {
      content: [{ type: "text", text }],
      structuredContent: {
        ...emptyRun(),
        waiting: {
          run: id,
          call: n,
          ...(server === undefined ? {} : { server }),
          tool: toolName,
          ...(args === undefined ? {} : { arguments: args }),
          argumentsDigest: approval.inputDigest,
          digest: approval.digest,
          expiresAt,
          approve,
          reject,
        },
      },
    };
  }
}

/** The script as the journal knows it: its digest (of the code as sent), its limits, and the tools it may call. */
function scriptProgram(
  code: string,
  timeoutMs: number,
  sandbox: CodemodeSandboxBase,
): { tools: ReadonlyMap<string, CodemodeTool>; program: JournaledProgram } {
  const tools = new Map<string, CodemodeTool>();
  const journaled: JournaledTool[] = [];
  for (const tool of sandbox.tools) {
    const mcp = tool as Partial<McpTool>;
    tools.set(tool.name, tool);
    journaled.push({
      id: tool.name,
      version: "mcp",
      // A tool that does not say it only reads may have acted: a crash while it ran leaves it unknown.
      effects: mcp.annotations?.readOnlyHint === true ? "read" : "write",
      approval: mcp.needsApproval === true ? "always" : "never",
    });
  }
  for (const global of sandbox.globals) {
    tools.set(GLOBAL_PREFIX + global.name, global);
    journaled.push({ id: GLOBAL_PREFIX + global.name, version: "mcp", effects: "read", approval: "never" });
  }
  const program: JournaledProgram = {
    digest: domainDigest("airlock:gateway-script:v1", code),
    limits: { wallTimeMillis: timeoutMs, maxToolInputBytes: MAX_BOUNDARY_BYTES },
    tools: journaled,
  };
  return { tools, program };
}

/** The limits a sandbox program carries; the adapter reads none of them (the sandbox's own hold). */
function scriptLimits(timeoutMs: number) {
  return Object.freeze({
    cpuMillis: timeoutMs,
    wallTimeMillis: timeoutMs,
    memoryBytes: 0,
    scratchBytes: 0,
    maxInputBytes: MAX_BOUNDARY_BYTES,
    maxOutputBytes: MAX_BOUNDARY_BYTES,
    maxToolInputBytes: MAX_BOUNDARY_BYTES,
    maxToolCalls: 0,
    maxToolConcurrency: 1,
  });
}

/**
 * The adapter the journal runs the script on: the sandbox's deterministic run, each call answered through the
 * journal's `call` (from the journal, or sent and journaled) and delivered in the journal's order. `done` gets the
 * script's result.
 */
function scriptAdapter(
  input: WaitingRunInput,
  values: Record<string, unknown>,
  done: (result: CodemodeResult) => void,
) {
  const { sandbox, script, timeoutMs } = input;
  return makeSandboxAdapter(
    {
      id: "mcp-gateway",
      version: "1",
      qualification: "production",
      deterministic: true,
      isAvailable: () => true,
      async execute(request) {
        const replay = request.deterministic;
        if (replay === undefined) return { status: "failed", reason: "sandbox_error" };
        const run: CodemodeRun = sandbox.start(script, {
          startedAt: replay.startedAt,
          seed: replay.seed,
          tools: sandbox.tools.map((tool) => ({ name: tool.name, description: tool.description ?? "" })),
          globals: sandbox.globals.map((global) => ({ name: global.name, spread: global.spread === true })),
          store: values,
          signal: request.signal,
          timeoutMs,
          onStarted: (fingerprint) => replay.onFingerprint?.(fingerprint),
          onCall: ({ id, target, name, args }) => {
            replay.call(target === "global" ? GLOBAL_PREFIX + name : name, args).then(
              ({ result, seq, now }) => {
                if (run.finished) return;
                try {
                  run.deliver(seq, now, id, outcomeOf(result));
                } catch {
                  // A run that ended meanwhile takes no more results.
                }
              },
              () => {},
            );
          },
        });
        const result = await run.result;
        done(result);
        return result.ok ? { status: "succeeded", output: null } : { status: "failed", reason: "program_error" };
      },
    },
    {},
  );
}

/** Sends one call the journal let through (ungated, or approved): its result as the journal keeps it. */
async function callTool(
  tools: ReadonlyMap<string, CodemodeTool>,
  toolId: string,
  input: unknown,
  signal: AbortSignal,
): Promise<ToolCallResult> {
  const tool = tools.get(toolId);
  if (tool === undefined) return failedCall("NOT_FOUND", `no tool ${toolId} is registered`);
  // A signal of the call's own, as every call of a run gets: what a tool hangs on it goes with the call.
  const own = new AbortController();
  const stop = () => own.abort(signal.reason);
  if (signal.aborted) stop();
  else signal.addEventListener("abort", stop, { once: true });
  try {
    const value = await tool.execute(input, { signal: own.signal, caller: JOURNAL_DECIDED });
    // The journal keeps JSON: a tool that answered nothing is null when replayed, as when it ran.
    const copied = tryCopyJson(value === undefined ? null : value, { maxBytes: MAX_JSON_BYTES });
    if (!copied.ok) return failedCall("TOOL_FAILED", `the result of ${toolId} is not JSON within limits`);
    return Object.freeze({ status: "succeeded" as const, output: copied.json.value });
  } catch (error) {
    const code = error instanceof AirlockError && isErrorCode(error.code) ? error.code : "TOOL_FAILED";
    return failedCall(code, messageOf(error));
  } finally {
    signal.removeEventListener("abort", stop);
  }
}

function failedCall(code: ErrorCode, message: string): ToolCallResult {
  return Object.freeze({ status: statusOf(code), error: Object.freeze({ code, message }) });
}

/** A journaled result as the script gets it: a tool's own failure as an error, Airlock's codes kept on it. */
function outcomeOf(result: ToolCallResult): CodemodeOutcome {
  if (result.status === "succeeded") return { ok: true, value: result.output };
  const { code, message } = result.error;
  return { ok: false, message, ...(code === "TOOL_FAILED" ? {} : { properties: { code } }) };
}

function messageOf(error: unknown): string {
  try {
    return error instanceof Error ? error.message : String(error);
  } catch {
    return "the tool failed with an error whose message cannot be read";
  }
}

function emptyRun() {
  return {
    ok: false,
    output: "",
    images: 0,
    truncated: false,
    calls: { total: 0, failed: 0, cancelled: 0, byTool: {} },
  };
}

/** `execute`'s answer when the gateway refuses or stops a waiting run itself: the public code and why. */
export function refusal(code: ErrorCode, message: string): McpToolResult {
  return {
    content: [{ type: "text", text: `Error (aborted): ${code}: ${message}` }],
    structuredContent: { ...emptyRun(), error: { kind: "aborted", name: code, code, message } },
    isError: true,
  };
}
