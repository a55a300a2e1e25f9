/**
 * Real workerd through miniflare: the test fixtures' agent and sandbox Workers, bundled with esbuild as Wrangler
 * would (ESM, neutral platform, QuickJS kept external and handed over as a CompiledWasm module).
 */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { CodemodeRemote } from "airlock-codemode/portable";
import type { Miniflare } from "miniflare";
import type { Outcome, Scenario } from "../fixtures/cloudflare/agent-worker.ts";

const here = dirname(fileURLToPath(import.meta.url));
const fixtures = join(here, "..", "fixtures", "cloudflare");
/** Where the bundles say they are: the wasm import of airlock-codemode/cloudflare is `../engine/...` from there. */
const ROOT = "/airlock-workerd";
const COMPATIBILITY_DATE = "2026-04-22";

/** A Worker's entry bundled for the Workers platform; its imports of wasm and of the runtime stay as they are. */
export async function bundleWorker(entry: string): Promise<string> {
  // Loaded on use: the shared suites import this file on Bun too, where the durable-object launcher is left out.
  const { build } = await import("esbuild");
  const result = await build({
    entryPoints: [entry],
    bundle: true,
    format: "esm",
    platform: "neutral",
    external: ["*.wasm", "cloudflare:workers"],
    write: false,
    logLevel: "silent",
  });
  return result.outputFiles[0]?.text ?? "";
}

/** Imports of `node:` modules and of wasm files in a bundle (import statements and dynamic imports). */
export function platformImports(bundle: string): string[] {
  const found = bundle.match(/(?:\bfrom\s*|\bimport\s*\(?\s*|\brequire\s*\(\s*)["'](node:[^"']+|[^"']+\.wasm)["']/g);
  return found ?? [];
}

export interface Workerd {
  mf: Miniflare;
  run(scenario: Scenario): Promise<Outcome>;
  inline(code: string, interruptBudget?: number): Promise<unknown>;
  dispose(): Promise<void>;
}

export const agentEntry = join(fixtures, "agent-worker.ts");
export const sandboxEntry = join(fixtures, "sandbox-worker.ts");

export async function startWorkerd(): Promise<Workerd> {
  const [agent, sandbox] = await Promise.all([bundleWorker(agentEntry), bundleWorker(sandboxEntry)]);
  // The module airlock-codemode/cloudflare imports, as a bundler finds it beside the package's files.
  const wasm = readFileSync(join(here, "..", "..", "dist", "engine", "wasm", "quickjs-tracked.wasm"));
  const { Miniflare } = await import("miniflare");
  const mf = new Miniflare({
    // Fetches nothing at start (the request.cf data).
    cf: false,
    workers: [
      {
        name: "agent",
        compatibilityDate: COMPATIBILITY_DATE,
        modulesRoot: ROOT,
        modules: [{ type: "ESModule", path: `${ROOT}/agent.js`, contents: agent }],
        durableObjects: {
          SANDBOX: { className: "CodemodeSandbox", scriptName: "sandbox" },
          RAISED: { className: "RaisedSandbox", scriptName: "sandbox" },
          FAILING: { className: "FailingSandbox", scriptName: "sandbox" },
          ROOMY: { className: "RoomySandbox", scriptName: "sandbox" },
        },
      },
      {
        name: "sandbox",
        compatibilityDate: COMPATIBILITY_DATE,
        modulesRoot: ROOT,
        modules: [
          { type: "ESModule", path: `${ROOT}/cloudflare/sandbox.js`, contents: sandbox },
          { type: "CompiledWasm", path: `${ROOT}/engine/wasm/quickjs-tracked.wasm`, contents: wasm },
        ],
        durableObjects: {
          SANDBOX: "CodemodeSandbox",
          RAISED: "RaisedSandbox",
          FAILING: "FailingSandbox",
          ROOMY: "RoomySandbox",
        },
      },
    ],
  });
  await mf.ready;
  return {
    mf,
    async run(scenario) {
      const response = await mf.dispatchFetch("http://agent/", { method: "POST", body: JSON.stringify(scenario) });
      const text = await response.text();
      if (!response.ok) throw new Error(`the agent Worker answered ${response.status}: ${text.slice(0, 2000)}`);
      return JSON.parse(text) as Outcome;
    },
    async inline(code, interruptBudget) {
      // miniflare's Fetcher type leaves out fetch(); it is there.
      const worker = (await mf.getWorker("sandbox")) as unknown as {
        fetch(url: string, init: { method: string; body: string }): Promise<Response>;
      };
      const response = await worker.fetch("http://sandbox/inline", {
        method: "POST",
        body: JSON.stringify({ code, interruptBudget }),
      });
      const text = await response.text();
      if (!response.ok) throw new Error(`the sandbox Worker answered ${response.status}: ${text.slice(0, 2000)}`);
      return JSON.parse(text);
    },
    dispose: () => mf.dispose(),
  };
}

export interface SingleWorker {
  /** POSTs `body` as JSON to `path` of the Worker and answers with its JSON. */
  post(path: string, body?: unknown): Promise<unknown>;
  dispose(): Promise<void>;
}

/**
 * One Worker of the tests' own with its Durable Objects (binding -> class), bundled as startWorkerd bundles the
 * sandbox Worker, with QuickJS beside it where airlock-codemode/cloudflare imports it.
 */
export async function startSingleWorker(entry: string, durableObjects: Record<string, string>): Promise<SingleWorker> {
  const code = await bundleWorker(entry);
  const wasm = readFileSync(join(here, "..", "..", "dist", "engine", "wasm", "quickjs-tracked.wasm"));
  const { Miniflare } = await import("miniflare");
  const mf = new Miniflare({
    cf: false,
    compatibilityDate: COMPATIBILITY_DATE,
    modulesRoot: ROOT,
    modules: [
      { type: "ESModule", path: `${ROOT}/cloudflare/worker.js`, contents: code },
      { type: "CompiledWasm", path: `${ROOT}/engine/wasm/quickjs-tracked.wasm`, contents: wasm },
    ],
    durableObjects,
  });
  await mf.ready;
  return {
    async post(path, body) {
      const response = await mf.dispatchFetch(`http://worker${path}`, {
        method: "POST",
        body: JSON.stringify(body ?? {}),
      });
      const text = await response.text();
      if (!response.ok) throw new Error(`the Worker answered ${response.status}: ${text.slice(0, 2000)}`);
      return JSON.parse(text);
    },
    dispose: () => mf.dispose(),
  };
}

interface RelaySocket {
  accept(): void;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "message", listener: (event: { data: unknown }) => void): void;
  addEventListener(type: "close", listener: (event: { code: number; reason: string }) => void): void;
}

/**
 * A stub of the sandbox Worker's object `name` for a host in this process: the same `execute` RPC, made by the agent
 * Worker's relay with the request in its URL, and the host's end of `exchange` across a WebSocket (miniflare cannot
 * pass a function from Node).
 */
export function relayStub(workerd: Promise<Workerd>, name: string, binding = "SANDBOX"): CodemodeRemote {
  return {
    async execute(request, exchange) {
      const { mf } = await workerd;
      const query = `binding=${binding}&name=${encodeURIComponent(name)}&request=${encodeURIComponent(JSON.stringify(request))}`;
      const url = `http://agent/relay?${query}`;
      const response = await mf.dispatchFetch(url, { headers: { Upgrade: "websocket" } });
      const socket = (response as unknown as { webSocket: RelaySocket | null }).webSocket;
      if (!socket) throw new Error(`the relay answered ${response.status} without a WebSocket`);
      socket.accept();
      return new Promise<void>((resolve, reject) => {
        socket.addEventListener("message", (event) => {
          exchange(JSON.parse(String(event.data))).then(
            (commands) => socket.send(JSON.stringify(commands)),
            () => socket.send("null"),
          );
        });
        socket.addEventListener("close", (event) => {
          if (event.code === 1000) resolve();
          else reject(new Error(event.reason || `the relay closed with code ${event.code}`));
        });
      });
    },
  };
}

let shared: Promise<Workerd> | undefined;

/** One workerd for a whole test file, started on first use (see disposeSharedWorkerd). */
export function sharedWorkerd(): Promise<Workerd> {
  shared ??= startWorkerd();
  return shared;
}

/** Ends the file's workerd, if it started one: call it in the file's afterAll. */
export async function disposeSharedWorkerd(): Promise<void> {
  const started = shared;
  shared = undefined;
  if (started) await (await started).dispose();
}
