/**
 * The one naming scheme of upstream tools in the sandbox: `<server>__<tool>`, the config's server name and the
 * server's tool name joined by two underscores, with every character that cannot be in a JavaScript identifier
 * replaced by `_` (`toCodemodeIdentifier`). Server `github`'s `create_issue` is `tools.github__create_issue`; server
 * `everything`'s `get-sum` is `tools.everything__get_sum`. The sandbox tool is registered under that identifier, so
 * scripts, declarations, `search` and `describe` all use the same name.
 */
import { toCodemodeIdentifier } from "../platform/identifier.ts";

/** What joins a server's name and its tool's name. */
export const MCP_TOOL_SEPARATOR = "__";

/** The identifier a server's tools start with. */
export function serverPrefix(server: string): string {
  return toCodemodeIdentifier(server);
}

/** The sandbox name of tool `tool` of server `server`, for example `everything__get_sum`. */
export function mcpToolName(server: string, tool: string): string {
  return toCodemodeIdentifier(`${server}${MCP_TOOL_SEPARATOR}${tool}`);
}
