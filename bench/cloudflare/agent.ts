// The bench's agent Worker: N trivial executions in a row through Airlock's or pi-codemode's remote sandbox, each on
// its Durable Object of the same workerd, timed inside the agent.
import { RemoteCodemodeSandbox as PiRemote } from "@earendil-works/pi-codemode/portable";
import { RemoteCodemodeSandbox } from "airlock-codemode/portable";

interface Env {
  AIRLOCK: { getByName(name: string): never };
  PI: { getByName(name: string): never };
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    const n = Number(url.searchParams.get("n") ?? "1");
    const which = url.pathname === "/pi" ? "pi" : "airlock";
    const tools = [{ name: "echo", execute: async (args: unknown) => args }];
    const sandbox =
      which === "pi"
        ? new PiRemote({ tools, remote: () => env.PI.getByName("bench") })
        : new RemoteCodemodeSandbox({ tools, remote: () => env.AIRLOCK.getByName("bench") });
    const times: number[] = [];
    const began = performance.now();
    for (let i = 0; i < n; i++) {
      const started = performance.now();
      const result = await sandbox.execute("return 1");
      times.push(performance.now() - started);
      if (!result.ok) return Response.json({ error: result.error }, { status: 500 });
    }
    // workerd's clock moves in whole milliseconds, at I/O: the mean over the run is finer than each time.
    return Response.json({ times, meanMs: (performance.now() - began) / n });
  },
};
