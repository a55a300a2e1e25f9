// The agent's Worker: the tools, the call records and the deadline stay here; only the VM runs in the sandbox
// Worker's Durable Object. POST a script to /?session=ID: the executions of one session share an object.
import type { CodemodeSandboxDurableObject } from "airlock-codemode/cloudflare";
import { type CodemodeTool, RemoteCodemodeSandbox } from "airlock-codemode/portable";

/** The binding's type, as @cloudflare/workers-types names it: DurableObjectNamespace<CodemodeSandboxDurableObject>. */
interface SandboxNamespace {
  getByName(name: string): Pick<CodemodeSandboxDurableObject, "execute">;
}

interface Env {
  CODEMODE_SANDBOX: SandboxNamespace;
}

const tools: CodemodeTool[] = [
  {
    name: "getWeather",
    description: "The weather in a city",
    inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    execute: async (args) => ({ city: (args as { city: string }).city, celsius: 21 }),
  },
];

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    if (request.method !== "POST") return new Response("POST a script", { status: 405 });
    const sessionId = new URL(request.url).searchParams.get("session") ?? crypto.randomUUID();
    const sandbox = new RemoteCodemodeSandbox({
      tools,
      timeoutMs: 60_000,
      remote: () => env.CODEMODE_SANDBOX.getByName(sessionId),
    });
    const result = await sandbox.execute(await request.text(), { signal: request.signal });
    await sandbox.close();
    return Response.json(result);
  },
};
