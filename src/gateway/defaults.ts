/**
 * The gateway's defaults that `airlock serve --help` shows. They live apart from the gateway and the servers so that
 * the command line can print them without loading the MCP SDK.
 */

/**
 * Default deadline of one execution. MCP clients built on the official SDK give up on a request after 60 s by
 * default, so the gateway ends a run first and reports a timeout the model can act on.
 */
export const DEFAULT_GATEWAY_TIMEOUT_MS = 50_000;
/** Default cap on the tokens of text one execution returns. */
export const DEFAULT_MAX_OUTPUT_TOKENS = 20_000;
/** Address the HTTP server binds to unless told otherwise: this machine only. */
export const DEFAULT_HTTP_HOST = "127.0.0.1";
/** Default `sessionIdleMs`. */
export const DEFAULT_SESSION_IDLE_MS = 30 * 60_000;
/**
 * Default `maxSessionsPerPrincipal`: open HTTP sessions of one principal (whom a token names; all clients are one
 * without a token). Each keeps an MCP server and its store (up to `MAX_STORE_TOTAL_CHARS`, 1 MiB of JSON) until it is
 * closed, idle past `sessionIdleMs`, or closed to make room for a new one of its principal.
 */
export const DEFAULT_MAX_SESSIONS_PER_PRINCIPAL = 32;
/** Default `maxSessions`: open HTTP sessions of every principal together. */
export const DEFAULT_MAX_SESSIONS = 256;
/**
 * Default deadline of a person's answer to one approval request (MCP elicitation): past it the call is refused
 * (`GUARD_BLOCKED`) and not sent. Below `DEFAULT_GATEWAY_TIMEOUT_MS`, since the run's own deadline keeps counting.
 */
export const DEFAULT_APPROVAL_TIMEOUT_MS = 40_000;
/** Default cap on the approval requests one execution may ask; calls past it are refused without asking. */
export const DEFAULT_MAX_APPROVALS_PER_EXECUTION = 20;
