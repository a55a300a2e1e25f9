/** Errors of the MCP layer. Each names the server (and field) it is about, so that a person can fix it. */

/** A config file or object that cannot be used: `server` and `field` say where (both absent for the file itself). */
export class McpConfigError extends Error {
  override readonly name = "McpConfigError";
  readonly server: string | undefined;
  readonly field: string | undefined;

  constructor(message: string, where: { server?: string; field?: string } = {}) {
    super(message);
    this.server = where.server;
    this.field = where.field;
  }
}

/** An upstream server that did not start, did not finish the MCP handshake, or could not list its tools. */
export class McpUpstreamError extends Error {
  override readonly name = "McpUpstreamError";
  readonly server: string;
  /** The last lines the server wrote to stderr (stdio servers only; "" when it wrote nothing). */
  readonly stderrTail: string;
  /**
   * What went wrong in Airlock's words, without the command line, URL or stderr the message may hold (they can carry
   * secrets from the config): what models are told, for example "did not start: command "npx" was not found".
   */
  readonly reason: string;

  constructor(server: string, message: string, stderrTail = "", options?: { cause?: unknown; reason?: string }) {
    const tail = stderrTail.trim();
    super(tail === "" ? message : `${message}\nIts stderr ended with:\n${indent(tail)}`, options);
    this.server = server;
    this.stderrTail = tail;
    this.reason = options?.reason ?? "failed";
  }
}

/** Two upstream tools that would have the same name in the sandbox. */
export class McpToolCollisionError extends Error {
  override readonly name = "McpToolCollisionError";
  /** The sandbox name both tools map to. */
  readonly toolName: string;
  /** The two tools, as `{ server, tool }` with their original names. */
  readonly tools: readonly { server: string; tool: string }[];

  constructor(toolName: string, first: { server: string; tool: string }, second: { server: string; tool: string }) {
    const [server, tool] = [JSON.stringify(first.server), JSON.stringify(first.tool)];
    // Renaming a server cannot part two tools of that same server.
    let message: string;
    if (first.server !== second.server) {
      message =
        `tool ${tool} of server ${server} and tool ${JSON.stringify(second.tool)} of server ` +
        `${JSON.stringify(second.server)} would both be tools.${toolName}. Rename one of the servers in the config, ` +
        `or leave one of the tools out with the server's "tools" allow-list.`;
    } else if (first.tool === second.tool) {
      message =
        `server ${server} lists the tool ${tool} twice (tools.${toolName}). Fix the server, or leave the tool out ` +
        `with the server's "tools" allow-list.`;
    } else {
      message =
        `tools ${tool} and ${JSON.stringify(second.tool)} of server ${server} would both be tools.${toolName}. ` +
        `Leave one of them out with the server's "tools" allow-list.`;
    }
    super(`Tool name collision: ${message}`);
    this.toolName = toolName;
    this.tools = [first, second];
  }
}

function indent(text: string): string {
  return text
    .split("\n")
    .map((line) => `  ${line}`)
    .join("\n");
}
