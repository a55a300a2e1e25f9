/**
 * `airlock-codemode/mcp`: MCP servers as sandbox tools, and the code-mode gateway (`airlock serve`).
 *
 * Upstream tools are named `<server>__<tool>` (see `mcpToolName`): `tools.github__create_issue(args)` in a script.
 */

export {
  MAX_AUTHORIZATION_CHARS,
  type OAuthResourceServerOptions,
} from "./gateway/auth.ts";
export {
  DEFAULT_APPROVAL_TIMEOUT_MS,
  DEFAULT_GATEWAY_TIMEOUT_MS,
  DEFAULT_HTTP_HOST,
  DEFAULT_MAX_APPROVALS_PER_EXECUTION,
  DEFAULT_MAX_OUTPUT_TOKENS,
  DEFAULT_MAX_SESSIONS,
  DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
  DEFAULT_SESSION_IDLE_MS,
} from "./gateway/defaults.ts";
export { DEFAULT_DECLARATIONS_MAX_TOKENS, type DeclarationsForm } from "./gateway/description.ts";
export {
  type GatewaySearchResult,
  type GatewaySessionOptions,
  McpGateway,
  type McpGatewayOptions,
  startMcpGateway,
} from "./gateway/gateway.ts";
export {
  HTTP_RECEIVE_TIMEOUT_MS,
  MAX_HTTP_BODY_BYTES,
  MAX_HTTP_BODY_BYTES_PER_PRINCIPAL,
  MAX_HTTP_BODY_BYTES_TOTAL,
  MAX_HTTP_REQUESTS_PER_PRINCIPAL,
  MAX_HTTP_REQUESTS_TOTAL,
  SESSION_EVICTION_GRACE_MS,
} from "./gateway/http-limits.ts";
export type { ExecuteStructuredResult, McpContentBlock, McpToolResult } from "./gateway/output.ts";
export {
  DEFAULT_HTTP_PATH,
  type HttpServing,
  type ServeHttpOptions,
  type ServeStdioOptions,
  type StdioServing,
  serveGatewayHttp,
  serveGatewayStdio,
} from "./gateway/serving.ts";
export { type GatewayExecuteOptions, MAX_LOG_CHARS_PER_RUN, MAX_LOG_MESSAGES_PER_RUN } from "./gateway/session.ts";
export { MAX_STDIO_LINE_BYTES } from "./gateway/stdio.ts";
export {
  DEFAULT_GATEWAY_SCOPE,
  type GatewayWaitingOptions,
  type WaitingDecision,
} from "./gateway/waiting.ts";
export {
  type ApprovalOutcome,
  type ApprovalRecord,
  MAX_APPROVAL_ARGUMENTS_CHARS,
  MAX_APPROVAL_RECORDS,
} from "./upstream/approval.ts";
export {
  loadMcpConfig,
  type McpApprovalConfig,
  type McpConfig,
  type McpHttpServerConfig,
  type McpServerConfig,
  type McpServerSpec,
  type McpStdioServerConfig,
  type ParsedMcpConfig,
  type ParseMcpConfigOptions,
  parseMcpConfig,
} from "./upstream/config.ts";
export {
  DEFAULT_CALL_TIMEOUT_MS,
  DEFAULT_CONNECT_TIMEOUT_MS,
  MAX_TOOL_LIST_PAGES,
} from "./upstream/server.ts";
export { mcpToolName } from "./upstream/tool-names.ts";
export {
  type ConnectMcpServersOptions,
  connectMcpServers,
  type McpServerStatus,
  type McpTool,
  McpToolset,
  type McpToolsetChange,
} from "./upstream/toolset.ts";
export { McpConfigError, McpToolCollisionError, McpUpstreamError } from "./upstream/upstream-errors.ts";
export {
  DEFAULT_SEARCH_LIMIT,
  MAX_DESCRIBE_NAMES,
  MAX_RESOURCE_URI_CHARS,
  MAX_SEARCH_LIMIT,
  MAX_SEARCH_QUERY_CHARS,
  MAX_STDIO_CALL_ARGUMENT_BYTES,
  MAX_TOOL_NAME_CHARS,
  MAX_UPSTREAM_ANSWER_BYTES_IN_FLIGHT,
  MAX_UPSTREAM_LIST_BYTES,
  MAX_UPSTREAM_LIST_ITEMS,
  MAX_UPSTREAM_MESSAGE_BYTES,
  MAX_UPSTREAM_OWED_ANSWERS,
  MAX_UPSTREAM_TOOLS,
} from "./upstream/upstream-limits.ts";
