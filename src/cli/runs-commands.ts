/**
 * `airlock runs`, `airlock approvals`, `airlock approve` and `airlock reject`: an operator's view of a durable store
 * (a SQLite file or a PostgreSQL URL): workflow runs and paused programs, what waits for a person, and the decision.
 * A decision needs the person's credential (from the environment, never the command line, which other users can
 * read) and a verifier module that checks it, as the application's own `verifyHuman` does.
 */
import { APPROVER_CREDENTIAL_ENV, EXIT_OK, parseFlags, UsageError } from "./args.ts";
import type { Command } from "./command.ts";

const STORE_HELP = `  --store <file|url>   The store: a SQLite file (it must exist) or a postgres:// URL
  --schema <name>      PostgreSQL schema of the store (default airlock)`;

const listFlags = {
  store: { type: "string" },
  schema: { type: "string" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const;

export const runsCommand: Command = {
  name: "runs",
  synopsis: "runs list|show <id>",
  summary: "List the workflow runs and paused programs of a durable store, or show one",
  usage: `Usage: airlock runs list --store <file|url> [--json]
       airlock runs show <id> --store <file|url> [--json]

Lists the workflow runs and paused (or finished) programs of a durable store, newest first, or shows one run:
its steps, approvals, receipts, budget and events. <id> is a run id (or 8 or more of its first characters) or a
program's execution id.

Options:
${STORE_HELP}
  --json               Print JSON
  -h, --help           Show this help
`,
  async run(argv, io) {
    const { values, positionals } = parseFlags(argv, listFlags);
    if (values.help) {
      io.stdout(this.usage);
      return EXIT_OK;
    }
    const [action, id, ...extra] = positionals;
    if (action !== "list" && action !== "show") throw new UsageError("say runs list or runs show <id>");
    if (action === "show" && id === undefined) throw new UsageError("runs show needs an id");
    if (extra.length > 0 || (action === "list" && id !== undefined)) throw new UsageError("too many arguments");
    return (await import("./durable.ts")).runsAction(values, io, action, id);
  },
};

export const approvalsCommand: Command = {
  name: "approvals",
  synopsis: "approvals list",
  summary: "List what waits for a person's approval in a durable store",
  usage: `Usage: airlock approvals list --store <file|url> [--json]

Lists every workflow step and every program call of the store that waits for a person: its run (or execution
id), its step (or call:<n>), its tool and version, the digest to approve and when the request expires.

Options:
${STORE_HELP}
  --json               Print JSON
  -h, --help           Show this help
`,
  async run(argv, io) {
    const { values, positionals } = parseFlags(argv, listFlags);
    if (values.help) {
      io.stdout(this.usage);
      return EXIT_OK;
    }
    if (positionals.length !== 1 || positionals[0] !== "list") throw new UsageError("say approvals list");
    return (await import("./durable.ts")).approvalsAction(values, io);
  },
};

const decideFlags = {
  store: { type: "string" },
  schema: { type: "string" },
  digest: { type: "string" },
  verifier: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

function decisionCommand(verdict: "approved" | "rejected"): Command {
  const name = verdict === "approved" ? "approve" : "reject";
  return {
    name,
    synopsis: `${name} <run> <node> --digest <d>`,
    summary: verdict === "approved" ? "Approve a waiting step or call" : "Reject a waiting step or call",
    usage: `Usage: airlock ${name} <run> <node> --digest <digest> --verifier <module> --store <file|url>

${verdict === "approved" ? "Approves" : "Rejects"} what waits at <node> of <run>, as "airlock approvals list" shows them: a workflow
step (<run> a run id, <node> its step id) or a program's call (<run> its execution id, <node> call:<n>). The digest
must be the pending one: a request that changed or expired is refused. ${
      verdict === "approved"
        ? "The step runs when a worker drives the run next; a program continues when its application resumes it."
        : "A rejected step ends blocked; a rejected call reaches its program as a GUARD_BLOCKED result."
    }

The person's credential is read from the environment variable ${APPROVER_CREDENTIAL_ENV}; the verifier module exports
verifyHuman(credential) -> { id, projectId, canApprove }, as the application passes to its runtime. Only the
person's id is stored.

Options:
${STORE_HELP}
  --digest <digest>    The 64-hex digest of the pending approval
  --verifier <module>  JS module exporting verifyHuman
  -h, --help           Show this help

Exit status: 0 decided, 1 refused (PERMISSION_DENIED, CONFLICT, NOT_FOUND), 2 bad usage.
`,
    async run(argv, io) {
      const { values, positionals } = parseFlags(argv, decideFlags);
      if (values.help) {
        io.stdout(this.usage);
        return EXIT_OK;
      }
      const [runId, node, ...extra] = positionals;
      if (runId === undefined || node === undefined || extra.length > 0)
        throw new UsageError(`${name} needs <run> <node>`);
      const digest = values.digest;
      if (digest === undefined || !/^[a-f0-9]{64}$/.test(digest))
        throw new UsageError("--digest must be 64 hex digits");
      return (await import("./durable.ts")).decideAction(values, io, verdict, runId, node, digest);
    },
  };
}

export const approveCommand = decisionCommand("approved");
export const rejectCommand = decisionCommand("rejected");
