/**
 * Upstream servers fail alone: one that does not start, or dies for good, leaves the gateway serving the others, is
 * reported, and is tried again in the background until it is back, when its tools return and clients are told.
 * The servers are real (the paging fixture, which can refuse to start while a file is missing).
 */
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { type CallToolResult, ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { McpGateway } from "airlock-codemode/mcp";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { McpUpstream } from "../dist/upstream/server.js";
import { isAlive, paged, tempFolder, waitFor } from "./fixtures/mcp/servers.ts";

let folder: { dir: string; cleanup: () => void };
let ready = "";

beforeEach(() => {
  folder = tempFolder();
  ready = join(folder.dir, "ready");
});

afterEach(() => folder?.cleanup());

function textOf(result: unknown): string {
  return (result as CallToolResult).content
    .filter((block) => block.type === "text")
    .map((block) => (block as { text: string }).text)
    .join("\n");
}

async function start(events: string[], delays: number[] = []) {
  const gateway = await McpGateway.start(
    { mcpServers: { steady: paged("--tools", "2"), flaky: paged("--tools", "3", "--fail-start-unless", ready) } },
    {
      poolSize: 1,
      retryInitialMs: 100,
      retryMaxMs: 400,
      onDown: (server, down) => {
        events.push(`down ${server} ${down.attempts}`);
        delays.push(down.retryAt - Date.now());
      },
      onUp: (server) => events.push(`up ${server}`),
    },
  );
  const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
  await gateway.createServer().connect(serverSide);
  const client = new Client({ name: "fail-alone", version: "1.0.0" });
  let changed = 0;
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    changed++;
  });
  await client.connect(clientSide);
  const run = async (code: string) => textOf(await client.callTool({ name: "execute", arguments: { code } }));
  return { gateway, client, run, changed: () => changed };
}

describe("a server that does not start", () => {
  it("leaves the others serving, backs off, and comes back with its tools when it starts", async () => {
    const events: string[] = [];
    const delays: number[] = [];
    const { gateway, client, run, changed } = await start(events, delays);
    try {
      expect(gateway.toolset.status().map((s) => `${s.server} ${s.state}`)).toEqual(["steady up", "flaky down"]);
      expect(await run("return (await tools.steady__item_1()).item")).toBe("1");
      // Models are told why in Airlock's words, without the command line (the config's secrets may be in it).
      expect(gateway.executeDescription()).toContain(
        "- flaky: did not start: the process exited before finishing the MCP handshake",
      );
      expect(gateway.executeDescription()).not.toContain("Command:");
      // It never listed its tools: a program does not find them.
      expect(await run("return await tools.flaky__item_1()")).toMatch(
        /^Error \(script\): TypeError: tools\.flaky__item_1 does not exist/,
      );
      // Tried again with a doubling delay, up to the most (each delay as set when the attempt failed).
      await waitFor(() => events.includes("down flaky 4"), 30_000, "four failed attempts");
      expect(delays.slice(0, 4).map((ms) => Math.ceil(ms / 100) * 100)).toEqual([100, 200, 400, 400]);
      expect(gateway.toolset.down[0]?.down?.attempts).toBeGreaterThanOrEqual(4);

      const seen = changed();
      writeFileSync(ready, "");
      await waitFor(() => events.includes("up flaky"), 10_000, "the server to come back");
      expect(gateway.toolset.status().map((s) => `${s.server} ${s.state} ${s.tools}`)).toEqual([
        "steady up 6",
        "flaky up 7",
      ]);
      await waitFor(() => changed() > seen, 5_000, "tools/list_changed");
      const execute = (await client.listTools()).tools.find((tool) => tool.name === "execute");
      expect(execute?.description).not.toContain("Down now");
      expect(execute?.description).toContain("flaky__item_2(args: {})");
      expect(await run("return (await tools.flaky__item_2()).item")).toBe("2");
    } finally {
      await client.close();
      await gateway.close();
    }
  });
});

describe("a server that dies for good", () => {
  it("is found down when it cannot be started again, its calls fail at once, and it is back once it can", async () => {
    writeFileSync(ready, "");
    const events: string[] = [];
    const { gateway, client, run } = await start(events);
    try {
      expect(await run("return (await tools.flaky__item_0()).item")).toBe("0");
      const flaky = gateway.toolset.upstream("flaky") as McpUpstream;
      const pid = flaky.pid as number;
      // It dies, and cannot start again.
      rmSync(ready);
      process.kill(pid, "SIGKILL");
      await waitFor(() => !isAlive(pid) && !flaky.connected, 10_000, "the server to die");
      const failed = await run("return await tools.flaky__item_0()");
      expect(failed).toMatch(
        /^Error \(script\): Error: server "flaky" did not start: the process exited before finishing the MCP handshake\n/,
      );
      expect(failed).not.toContain("Command:");
      expect(events).toContain("down flaky 1");
      // While it is down its calls fail at once, saying so; the other server serves on.
      const fast = await run("return await tools.flaky__item_0()");
      expect(fast).toMatch(
        /server "flaky" is down \(it did not start: the process exited before finishing the MCP handshake\); it is tried again in the background, next in \d+ s/,
      );
      expect(await run("return (await tools.steady__item_0()).item")).toBe("0");
      // The tools it had stay declared, marked down in the description.
      expect(gateway.executeDescription()).toContain("Down now, tried again in the background");

      writeFileSync(ready, "");
      await waitFor(() => events.includes("up flaky"), 10_000, "the server to come back");
      expect(await run("return (await tools.flaky__item_1()).item")).toBe("1");
    } finally {
      await client.close();
      await gateway.close();
    }
  });
});
