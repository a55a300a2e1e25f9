import {
  CodemodeSandbox,
  type CodemodeSandboxBase,
  type CodemodeSandboxBaseOptions,
  InlineCodemodeSandbox,
  type PoolStats,
  ProcessCodemodeSandbox,
} from "airlock-codemode";
import { RemoteCodemodeSandbox } from "airlock-codemode/portable";
import { afterAll } from "vitest";
import { warmFirst } from "../fixtures/process/warm-first.ts";
import { hasSystemTool } from "./system-tools.ts";
import { disposeSharedWorkerd, relayStub, sharedWorkerd } from "./workerd.ts";

/** The process tier runs on Node only: under Bun its launchers are left out of the shared suites. */
const onNode = process.versions.bun === undefined;

/**
 * Interrupt polls of a script in the Durable Object (one every 10,000 ticks): workerd runs every Worker of a test on
 * one thread, so a script that never yields holds up the others until its budget ends (about 0.7 s here, against the
 * default's 7 s).
 */
const WORKERD_INTERRUPT_BUDGET = 10_000;

// The file's workerd, where the durable-object launcher started one.
afterAll(disposeSharedWorkerd);

/** Every launcher that claims the shared behaviour; each test of the shared suite runs against all of them. */
export const launchers: {
  name: string;
  make(options?: CodemodeSandboxBaseOptions): CodemodeSandboxBase & { warm(): Promise<void> };
}[] = [
  { name: "inline", make: (options = {}) => new InlineCodemodeSandbox(options) },
  { name: "worker", make: (options = {}) => new CodemodeSandbox({ poolSize: 1, ...options }) },
  // The VM in a Durable Object of real workerd, a subclass that lets scripts ask for as much memory as the suites do;
  // the host, its tools and records here (through the agent's relay).
  ...(onNode
    ? [
        {
          name: "durable-object",
          make: (options: CodemodeSandboxBaseOptions = {}) => {
            const session = crypto.randomUUID();
            return new RemoteCodemodeSandbox({
              interruptBudget: WORKERD_INTERRUPT_BUDGET,
              ...options,
              remote: () => relayStub(sharedWorkerd(), session, "ROOMY"),
            });
          },
        },
      ]
    : []),
  ...(onNode && hasSystemTool("bwrap")
    ? [
        {
          name: "process",
          make: (options = {}) => warmFirst(new ProcessCodemodeSandbox({ poolSize: 1, ...options })),
        },
      ]
    : []),
  ...(onNode && hasSystemTool("runsc")
    ? [
        {
          name: "gvisor",
          make: (o = {}) =>
            warmFirst(new ProcessCodemodeSandbox({ poolSize: 1, ...o, isolation: { runtime: "gvisor" } })),
        },
      ]
    : []),
];

/** Options of the launchers that keep a pool of VM sides. */
export type PoolOptions = CodemodeSandboxBaseOptions & { poolSize?: number; maxPoolSize?: number };

/**
 * Every launcher that keeps a pool of VM sides (and so claims the behaviour of many executions at once); the protocol
 * adapter's pool runs programs only and is tested through code mode.
 */
export const pooledLaunchers: {
  name: string;
  make(options?: PoolOptions): CodemodeSandboxBase & { warm(): Promise<void>; readonly poolStats: PoolStats };
}[] = [
  { name: "worker", make: (options = {}) => new CodemodeSandbox(options) },
  ...(onNode && hasSystemTool("bwrap")
    ? [{ name: "process", make: (options: PoolOptions = {}) => warmFirst(new ProcessCodemodeSandbox(options)) }]
    : []),
  ...(onNode && hasSystemTool("runsc")
    ? [
        {
          name: "gvisor",
          make: (o: PoolOptions = {}) =>
            warmFirst(new ProcessCodemodeSandbox({ ...o, isolation: { runtime: "gvisor" } })),
        },
      ]
    : []),
  // The process tier's fallback where bubblewrap is missing (here: pointed at none): plain child processes.
  ...(onNode
    ? [
        {
          name: "plain child",
          make: (o: PoolOptions = {}) =>
            warmFirst(
              new ProcessCodemodeSandbox({
                ...o,
                isolation: { bwrapPath: "/nonexistent/bwrap", allowDegraded: true },
              }),
            ),
        },
      ]
    : []),
];

/** A 1x1 PNG, GIF and JPEG/WebP headers, as base64. */
export const PNG_1x1 =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
export const GIF_1x1 = "R0lGODlhAQABAAAAACw=";
export const JPEG_HEAD = Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 0x10, 0x4a, 0x46]).toString("base64");
export const WEBP_HEAD = Buffer.from("RIFF\x00\x00\x00\x00WEBPVP8 ", "latin1").toString("base64");
