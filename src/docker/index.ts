/**
 * `airlock-codemode/adapter-code-docker`: runs code-mode programs on Airlock's VM side inside a Docker container, one
 * container per connection, started with
 *
 *   docker [--host H] run --rm -i --pull=never --network=none --read-only --cap-drop=ALL
 *     --security-opt no-new-privileges [--security-opt seccomp=PROFILE] --user 65534:65534 --pids-limit N
 *     --ulimit nofile=N:N --ulimit core=0:0 --cpus N --memory M --memory-swap M
 *     --tmpfs /tmp:rw,noexec,nosuid,nodev,size=S --ipc=none [--runtime=runsc] --entrypoint node sha256:IMAGE ENTRY
 *
 * The CLI is an absolute path (PATH is never searched); the image is an exact image id and is never pulled; before
 * the first container (and after every restart) `docker image inspect` must show that id and the exact provenance
 * digest in the image's `dev.airlock.provenance` label, or nothing runs. Docker's default seccomp profile applies
 * unless you pass your own; `unconfined` is never used. Messages travel as length-prefixed JSON frames over the
 * container's stdin/stdout. Build the image from the installed package as container-image.ts says; the provenance is the
 * digest of the SPDX document describing its root folder.
 *
 * `createPromotedDockerQuickJsSandboxAdapter` also needs a promotion (promotion.ts): a signed statement that the image
 * passed a clean vulnerability scan, checked before every execution; without a valid one nothing runs and the
 * execution's UNSUPPORTED_PROFILE message says why.
 */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import type { Readable, Writable } from "node:stream";
import { type ClosableSandboxAdapter, makeProtocolAdapter } from "../adapter-code-quickjs/protocol-adapter.ts";
import { encodeFrame, FrameReader } from "../process/frames.ts";
import type { QuickJsHostMessage, QuickJsProtocolTransport } from "../transport/channel.ts";
import {
  type CheckedDockerOptions,
  checkDockerOptions,
  checkImage,
  type DockerSandboxOptions,
  inspectArgs,
  killArgs,
  runArgs,
} from "./docker-cli.ts";
import {
  checkMaxScanAge,
  type DockerImagePromotion,
  DockerPromotionError,
  verifyDockerImagePromotion,
} from "./promotion.ts";

export { DOCKERFILE, provenanceOfSpdx, writeDockerBuildContext } from "./container-image.ts";
export {
  CONTAINER_ENTRY,
  CONTAINER_ROOT,
  DEFAULT_DOCKER_LIMITS,
  DockerConfigError,
  type DockerLimits,
  type DockerSandboxOptions,
  PROVENANCE_LABEL,
} from "./docker-cli.ts";
export {
  DEFAULT_MAX_SCAN_AGE_MS,
  type DockerImagePromotion,
  type DockerImagePromotionIssuance,
  type DockerImagePromotionStatement,
  DockerPromotionError,
  issueDockerImagePromotion,
  MAX_SCAN_AGE_MS,
  PROMOTION_FORMAT,
  serializeDockerImagePromotion,
  verifyDockerImagePromotion,
} from "./promotion.ts";

export const DOCKER_ADAPTER_ID = "airlock.quickjs-docker";
export const DOCKER_ADAPTER_VERSION = "1";
/** Time a docker CLI call (inspect, kill) may take. */
const DOCKER_CLI_TIMEOUT_MS = 30_000;

/** Runs the docker CLI with a minimal environment and returns its exit status and output. */
function docker(options: CheckedDockerOptions, args: string[]): Promise<{ code: number | null; stdout: string }> {
  return new Promise((resolve) => {
    const child = spawn(options.dockerPath, args, { env: cliEnv(), stdio: ["ignore", "pipe", "ignore"] });
    let stdout = "";
    child.stdout.on("data", (d: Buffer) => {
      if (stdout.length < 1_000_000) stdout += d.toString("utf8");
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), DOCKER_CLI_TIMEOUT_MS);
    child.once("error", () => {
      clearTimeout(timer);
      resolve({ code: null, stdout });
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout });
    });
  });
}

/** The CLI gets no secrets of the host's environment: only HOME (for its config) and a fixed PATH for its plugins. */
function cliEnv(): Record<string, string> {
  return { PATH: "/usr/local/bin:/usr/bin:/bin", ...(process.env.HOME ? { HOME: process.env.HOME } : {}) };
}

/** Checks the image's id and provenance label; resolves to why it does not match, or undefined. */
export async function verifyDockerImage(options: DockerSandboxOptions): Promise<string | undefined> {
  const checked = checkDockerOptions(options);
  const { code, stdout } = await docker(checked, inspectArgs(checked));
  if (code !== 0) return "docker image inspect failed (is the image present? it is never pulled)";
  return checkImage(checked, stdout);
}

/**
 * Runs programs in a container per connection (see the module documentation). Qualified `production`: the
 * container's flags are fixed here and tested, and nothing runs unless the image's digests match. Call `close()` to
 * stop the container.
 */
export function createDockerQuickJsSandboxAdapter(options: DockerSandboxOptions): ClosableSandboxAdapter {
  return containerAdapter(checkDockerOptions(options), () => undefined);
}

export interface PromotedDockerSandboxOptions extends DockerSandboxOptions {
  /** The signed statement that the image passed a clean scan, and the public key the host pins for it. */
  promotion: DockerImagePromotion;
  /** Oldest scan accepted, in ms; default `DEFAULT_MAX_SCAN_AGE_MS` (24 h), at most `MAX_SCAN_AGE_MS` (7 days). */
  maxScanAgeMs?: number;
}

/**
 * The container adapter, for an image that must also carry a valid promotion: one whose signature verifies with its
 * pinned key, for this image and provenance, with a clean scan, issued, not expired and not older than
 * `maxScanAgeMs`. It is checked when the adapter is made (a bad one throws a `DockerPromotionError`, a TypeError,
 * saying why) and again before every execution and every container start, so that one that expired runs nothing.
 */
export function createPromotedDockerQuickJsSandboxAdapter(
  options: PromotedDockerSandboxOptions,
): ClosableSandboxAdapter {
  const checked = checkDockerOptions(options, ["promotion", "maxScanAgeMs"]);
  if (!Object.hasOwn(options, "promotion")) {
    throw new DockerPromotionError(
      "a promotion is required (createDockerQuickJsSandboxAdapter runs an image without one)",
    );
  }
  const maxScanAgeMs = checkMaxScanAge(options.maxScanAgeMs);
  const { promotion } = options;
  const expected = { image: checked.image, provenance: checked.provenance };
  verifyDockerImagePromotion(promotion, expected, maxScanAgeMs);
  return containerAdapter(checked, () => {
    try {
      verifyDockerImagePromotion(promotion, expected, maxScanAgeMs);
      return undefined;
    } catch (error) {
      return error instanceof DockerPromotionError ? error.message : "the promotion could not be checked";
    }
  });
}

/**
 * A container adapter whose image must verify, and which must pass `admit` (undefined, or why not) before every
 * execution and container start.
 */
function containerAdapter(checked: CheckedDockerOptions, admit: () => string | undefined): ClosableSandboxAdapter {
  let verified: Promise<string | undefined> | undefined;
  const verify = () => {
    verified ??= verifyDockerImage(checked).then((why) => {
      if (why !== undefined) verified = undefined; // checked again next time: the image may be fixed
      return why;
    });
    return verified;
  };
  const check = async () => admit() ?? (await verify());
  return makeProtocolAdapter(
    {
      id: DOCKER_ADAPTER_ID,
      version: DOCKER_ADAPTER_VERSION,
      qualification: "production",
      maxPoolSize: checked.maxPoolSize,
      launch: async () => {
        const why = await check();
        if (why !== undefined) throw new Error(`the container cannot start: ${why}`);
        return containerTransport(checked);
      },
    },
    async () => (await check()) === undefined,
    check,
  );
}

function containerTransport(options: CheckedDockerOptions): QuickJsProtocolTransport {
  const name = `airlock-${randomUUID()}`;
  const child = spawn(options.dockerPath, runArgs(options, name), {
    env: cliEnv(),
    stdio: ["pipe", "pipe", "pipe"],
  });
  const reader = new FrameReader();
  const handlers: ((message: unknown) => void)[] = [];
  const closeHandlers: (() => void)[] = [];
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    (child.stdin as Writable).destroy();
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    // Killing the CLI does not stop the container: ask the daemon (it is removed by --rm).
    void docker(options, killArgs(options, name));
    for (const handler of closeHandlers) handler();
  };
  (child.stdin as Writable).on("error", () => {});
  (child.stderr as Readable).resume();
  (child.stdout as Readable).on("data", (chunk: Buffer) => {
    let messages: unknown[];
    try {
      messages = reader.push(chunk);
    } catch {
      close();
      return;
    }
    for (const message of messages) for (const handler of handlers) handler(message);
  });
  child.once("exit", () => close());
  child.once("error", () => close());
  return {
    send: (message: QuickJsHostMessage) => {
      if (!closed) (child.stdin as Writable).write(encodeFrame(message));
    },
    onMessage: (handler) => handlers.push(handler),
    onClose: (handler) => closeHandlers.push(handler),
    close,
  };
}
