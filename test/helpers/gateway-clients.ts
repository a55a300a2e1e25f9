/** The gateway as a library in front of real MCP servers, and real MCP clients connected to it in memory. */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { McpGateway } from "airlock-codemode/mcp";

export interface GatewayClient {
  client: Client;
  /** Calls one of the gateway's tools (`search`, `describe`, `execute`). */
  call(tool: string, args: Record<string, unknown>): Promise<CallToolResult>;
  /** Calls `execute` with a program. */
  execute(code: string): Promise<CallToolResult>;
}

/** Starts a gateway (`McpGateway.start`); `connect` adds a client, `close` closes them all and the gateway. */
export async function gatewayWithClients(config: unknown, options: Parameters<typeof McpGateway.start>[1] = {}) {
  const gateway = await McpGateway.start(config, options);
  const clients: Client[] = [];
  const connect = async (name: string): Promise<GatewayClient> => {
    const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
    await gateway.createServer().connect(serverSide);
    const client = new Client({ name, version: "1.0.0" });
    await client.connect(clientSide);
    clients.push(client);
    const call = async (tool: string, args: Record<string, unknown>) =>
      (await client.callTool({ name: tool, arguments: args })) as CallToolResult;
    return { client, call, execute: (code) => call("execute", { code }) };
  };
  const close = async () => {
    for (const client of clients) await client.close();
    await gateway.close();
  };
  return { gateway, connect, close };
}
