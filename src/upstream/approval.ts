/**
 * A person's approval of single upstream calls, asked through the gateway's own client (MCP elicitation). A server's
 * `approval` config field names the tools. Before a call of such a tool is sent, the gateway asks the session whose
 * `execute` request runs the program (`elicitation/create` on that request's own stream), naming the server, the tool
 * and the exact arguments. Only an accepted request sends the call; anything else (declined, dismissed, no answer in
 * time, too many requests, a client without elicitation) rejects it in the script with `GUARD_BLOCKED`, unsent.
 */
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import {
  type ElicitRequestFormParams,
  type ElicitResult,
  ErrorCode,
  McpError,
  type RequestId,
} from "@modelcontextprotocol/sdk/types.js";
import { AirlockError } from "../tools/errors.ts";

/**
 * Most characters of a call's arguments (JSON, indented) an approval request shows. A call whose arguments are longer
 * is refused without asking: a person approves exactly what is sent, never a cut of it.
 */
export const MAX_APPROVAL_ARGUMENTS_CHARS = 8_000;
/**
 * Calls that needed approval listed in one execution's `approvals`; past it they are counted only (a program may make
 * thousands of calls that are refused without asking).
 */
export const MAX_APPROVAL_RECORDS = 100;
/** Characters of a client's error message kept in the script's error when an approval request fails. */
const MAX_CLIENT_ERROR_CHARS = 200;

/** What became of one call that needed approval. */
export type ApprovalOutcome =
  /** The person approved it; it was sent. */
  | "accepted"
  /** The person declined it. */
  | "declined"
  /** The person dismissed the request without answering. */
  | "cancelled"
  /** No answer came before the approval deadline (or the run ended first). */
  | "expired"
  /** The execution had asked its most requests already; the person was not asked. */
  | "over_limit"
  /** Its arguments are longer than `MAX_APPROVAL_ARGUMENTS_CHARS`; the person was not asked. */
  | "too_large"
  /** The client did not declare the elicitation capability; the person could not be asked. */
  | "unsupported"
  /** The request failed (the client answered with an error, or with content the form does not take). */
  | "failed";

/** One call that needed approval, as `execute`'s `structuredContent.approvals` lists it. */
export interface ApprovalRecord {
  /** The server's key in the config. */
  server: string;
  /** The tool's name on its server. */
  tool: string;
  decision: ApprovalOutcome;
}

/** The client session of one `execute` request, as the gate asks it. */
export interface ApprovalAsker {
  /** Whether the client declared form elicitation (an empty `elicitation` capability counts as form). */
  readonly canElicit: boolean;
  elicit(params: ElicitRequestFormParams, options: { signal: AbortSignal; timeoutMs: number }): Promise<ElicitResult>;
}

/** Asks the client of `server` in the stream of request `requestId` (over HTTP, that request's own event stream). */
export function sessionAsker(server: Server, requestId: RequestId): ApprovalAsker {
  return {
    get canElicit() {
      return server.getClientCapabilities()?.elicitation?.form !== undefined;
    },
    elicit: (params, { signal, timeoutMs }) =>
      server.elicitInput(params, { relatedRequestId: requestId, signal, timeout: timeoutMs }),
  };
}

export interface ApprovalLimits {
  /** Deadline of the person's answer to one request. */
  timeoutMs: number;
  /** Most requests one execution may ask. */
  maxRequests: number;
}

/** One call of a tool that needs approval. */
export interface ApprovalCall {
  server: string;
  /** The tool's name on its server. */
  tool: string;
  /** Its name in the sandbox: `tools.<name>`. */
  name: string;
  args: Record<string, unknown>;
}

/** The form of an approval request: one checkbox, already checked, so that accepting the request approves. */
const APPROVAL_SCHEMA = {
  type: "object",
  properties: {
    approve: {
      type: "boolean",
      title: "Send this call",
      description: "Accept to send exactly this call; decline to refuse it (the program is told and may go on).",
      default: true,
    },
  },
  required: ["approve"],
} as const satisfies ElicitRequestFormParams["requestedSchema"];

/**
 * One execution's approvals. The gateway hands it to the sandbox as the run's `caller`; every call of a tool that
 * needs approval goes through `require`, one request at a time (concurrent calls are asked in the order they came).
 */
export class ApprovalGate {
  /** Every call that needed approval, with what became of it, in order. */
  readonly approvals: ApprovalRecord[] = [];
  /** Calls past `MAX_APPROVAL_RECORDS`, not listed. */
  notListed = 0;
  private asked = 0;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly asker: ApprovalAsker,
    readonly limits: ApprovalLimits,
  ) {}

  /** Resolves once the person approved the call; otherwise rejects with `GUARD_BLOCKED` saying why. */
  require(call: ApprovalCall, signal: AbortSignal): Promise<void> {
    const turn = this.queue.then(() => this.ask(call, signal));
    this.queue = turn.catch(() => {});
    return turn;
  }

  /** Whether any call needed approval. */
  get used(): boolean {
    return this.approvals.length > 0;
  }

  /** The calls refused because the client cannot be asked. */
  get unsupported(): ApprovalRecord[] {
    return this.approvals.filter((record) => record.decision === "unsupported");
  }

  private async ask(call: ApprovalCall, signal: AbortSignal): Promise<void> {
    const decide = (decision: ApprovalOutcome, message?: string): void => {
      if (this.approvals.length < MAX_APPROVAL_RECORDS) {
        this.approvals.push({ server: call.server, tool: call.tool, decision });
      } else this.notListed++;
      if (message !== undefined) throw blocked(`${message}; the call was not sent`);
    };
    const what = `tools.${call.name}`;
    if (!this.asker.canElicit) {
      return decide(
        "unsupported",
        `${what} needs a person's approval, and this MCP client did not declare the elicitation capability, so the gateway cannot ask`,
      );
    }
    if (this.asked >= this.limits.maxRequests) {
      return decide(
        "over_limit",
        `${what} needs a person's approval, and this execution already asked ${this.limits.maxRequests} times, the most one execution may`,
      );
    }
    const shown = JSON.stringify(call.args, null, 2);
    if (shown.length > MAX_APPROVAL_ARGUMENTS_CHARS) {
      return decide(
        "too_large",
        `the arguments of ${what} are ${shown.length} characters of JSON, more than the ${MAX_APPROVAL_ARGUMENTS_CHARS} an approval request shows a person`,
      );
    }
    if (signal.aborted) return decide("expired", `the run ended before ${what} could be approved`);
    this.asked++;
    const message = `A program run by Airlock wants to call the tool ${JSON.stringify(call.tool)} of the MCP server ${JSON.stringify(call.server)} with these arguments:\n\n${shown}\n\nSend this one call?`;
    let result: ElicitResult;
    try {
      result = await this.asker.elicit(
        { mode: "form", message, requestedSchema: APPROVAL_SCHEMA },
        { signal, timeoutMs: this.limits.timeoutMs },
      );
    } catch (error) {
      if (signal.aborted) return decide("expired", `the run ended while ${what} waited for a person's approval`);
      if (error instanceof McpError && error.code === ErrorCode.RequestTimeout) {
        return decide(
          "expired",
          `no answer to the approval request for ${what} came within ${this.limits.timeoutMs} ms`,
        );
      }
      const reason = String((error as Error)?.message ?? error).slice(0, MAX_CLIENT_ERROR_CHARS);
      return decide("failed", `the approval request for ${what} failed: ${reason}`);
    }
    // An answer that comes after the run ended sends nothing.
    if (signal.aborted) return decide("expired", `the run ended while ${what} waited for a person's approval`);
    if (result.action === "accept" && result.content?.approve === true) return decide("accepted");
    if (result.action === "cancel") {
      return decide("cancelled", `the person dismissed the approval request for ${what} without answering`);
    }
    return decide("declined", `the person declined the call to ${what}`);
  }
}

/**
 * The caller of the calls a waiting run's journal sends (gateway/waiting.ts): the journal sends a call that needs approval
 * only once a person approved it (`airlock approve`), so the tool asks nobody again.
 */
export const JOURNAL_DECIDED: unique symbol = Symbol("airlock.journal-decided");

/**
 * Before a call of a tool that needs approval: asks through the run's gate. A run without one (the toolset used
 * outside the gateway's `execute`, or `execute` called without a session) has no one to ask, and the call is refused.
 */
export async function requireApproval(caller: unknown, call: ApprovalCall, signal: AbortSignal): Promise<void> {
  if (caller === JOURNAL_DECIDED) return;
  if (caller instanceof ApprovalGate) return caller.require(call, signal);
  throw blocked(
    `tools.${call.name} needs a person's approval (the "approval" field of server ${JSON.stringify(call.server)}), and this run has no MCP client to ask: only the gateway's execute asks, through MCP elicitation; the call was not sent`,
  );
}

/** Whether a server's `approval` field covers its tool `tool` (by its name on the server or in the sandbox). */
export function needsApproval(approval: "always" | "never" | readonly string[], tool: string, name: string): boolean {
  if (approval === "always") return true;
  if (approval === "never") return false;
  return approval.includes(tool) || approval.includes(name);
}

/** The note `execute` adds for calls the client could not be asked about: what to change. */
export function unsupportedNote(records: readonly ApprovalRecord[]): string {
  const tools = [...new Set(records.map((record) => `"${record.tool}" of server "${record.server}"`))];
  return `Not sent: ${tools.join(", ")} ${tools.length === 1 ? "needs" : "need"} a person's approval for every call (the server's "approval" field in the gateway's config), and this MCP client does not support elicitation, so the gateway could not ask. Use a client that declares the elicitation capability (form mode), start the gateway with a store (airlock serve --store <file|url>) so that such a run waits for a person's approval instead (airlock approve), or take the tool out of the server's "approval" field.`;
}

function blocked(message: string): AirlockError {
  return new AirlockError("GUARD_BLOCKED", message);
}
