/**
 * What pi-codemode's own test cases run against: every Airlock launcher that claims pi's behaviour, and
 * pi-codemode 1.6.0 itself (its `CodemodeSandbox`, a worker thread per execution), so that every case is known to
 * be one of pi's promises (pi 1.6.0 passes them all). Where Airlock deliberately differs, the list of differences in
 * docs/compatibility.md says why, and the case asserts each side's behaviour.
 */
import { CodemodeSandbox as PiCodemodeSandbox } from "@earendil-works/pi-codemode";
import type { CodemodeResult, CodemodeTool } from "airlock-codemode";
import { launchers } from "../../helpers/sandboxes.ts";

/** What the cases pass to a sandbox: pi's options, which Airlock's sandboxes take too. */
export interface CompatOptions {
  tools?: CodemodeTool[];
  globals?: CodemodeTool[];
  timeoutMs?: number;
  memoryLimitBytes?: number;
  wasm?: Promise<WebAssembly.Module>;
}

/** The API the cases use, which both products offer under the same names. */
export interface CompatSandbox {
  execute(
    code: string,
    options?: { signal?: AbortSignal; timeoutMs?: number; store?: Record<string, unknown> },
  ): Promise<CodemodeResult>;
  registerTool(tool: CodemodeTool): void;
  unregisterTool(name: string): boolean;
  readonly tools: { name: string }[];
  close(): Promise<void>;
}

export interface Target {
  name: string;
  /** True for pi-codemode itself. */
  pi: boolean;
  /** Takes the `wasm` option (a promise of a compiled module). */
  takesWasm: boolean;
  make(options?: CompatOptions): CompatSandbox;
}

const airlock: Target[] = launchers.map((launcher) => ({
  name: launcher.name,
  pi: false,
  takesWasm: launcher.name === "inline" || launcher.name === "worker",
  make: (options = {}) => launcher.make(options as never) as unknown as CompatSandbox,
}));

export const targets: Target[] = [
  ...airlock,
  {
    name: "pi-codemode 1.6.0",
    pi: true,
    takesWasm: true,
    make: (options = {}) => new PiCodemodeSandbox(options as never) as unknown as CompatSandbox,
  },
];

/** Sandboxes made by a case, closed after it. */
export function sandboxesOf(target: Target) {
  const open: CompatSandbox[] = [];
  return {
    make(options?: CompatOptions): CompatSandbox {
      const sandbox = target.make(options);
      open.push(sandbox);
      return sandbox;
    },
    async closeAll(): Promise<void> {
      await Promise.all(open.splice(0).map((sandbox) => sandbox.close()));
    },
  };
}
