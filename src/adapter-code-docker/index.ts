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
 * container's stdin/stdout.
 *
 * Building the image from the installed package (provenance = the sha256 of the package tarball):
 *
 *   npm pack airlock-codemode                   # or: the tarball your registry served
 *   PROVENANCE=sha256:$(sha256sum airlock-*.tgz | cut -d' ' -f1)
 *   cat > Dockerfile <<'END'
 *   FROM node:20-bookworm-slim
 *   ARG PROVENANCE
 *   COPY airlock-*.tgz /tmp/airlock.tgz
 *   RUN mkdir -p /opt/airlock && cd /opt/airlock && npm install --omit=dev --omit=peer /tmp/airlock.tgz \
 *       && rm /tmp/airlock.tgz
 *   LABEL dev.airlock.provenance=$PROVENANCE
 *   USER 65534:65534
 *   END
 *   docker build --build-arg PROVENANCE=$PROVENANCE --iidfile image.id .
 *   # image: the content of image.id (sha256:...); provenance: $PROVENANCE
 */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import type { Readable, Writable } from "node:stream";
import {
  type ClosableSandboxAdapter,
  createQuickJsProtocolAdapter,
  type QuickJsHostMessage,
  type QuickJsProtocolTransport,
} from "../adapter-code-quickjs/index.ts";
import { encodeFrame, FrameReader } from "../process/frames.ts";
import {
  type CheckedDockerOptions,
  checkDockerOptions,
  checkImage,
  type DockerSandboxOptions,
  inspectArgs,
  killArgs,
  runArgs,
} from "./args.ts";

export {
  CONTAINER_ENTRY,
  CONTAINER_USER,
  checkDockerOptions,
  checkImage,
  DEFAULT_DOCKER_LIMITS,
  DockerConfigError,
  type DockerLimits,
  type DockerSandboxOptions,
  inspectArgs,
  killArgs,
  PROVENANCE_LABEL,
  runArgs,
} from "./args.ts";

export const DOCKER_ADAPTER_ID = "airlock.quickjs-docker";
export const DOCKER_ADAPTER_VERSION = "1";
/** Time a docker CLI call (inspect, kill) may take. */
export const DOCKER_CLI_TIMEOUT_MS = 30_000;

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
  const checked = checkDockerOptions(options);
  let verified: Promise<string | undefined> | undefined;
  const verify = () => {
    verified ??= verifyDockerImage(checked).then((why) => {
      if (why !== undefined) verified = undefined; // checked again next time: the image may be fixed
      return why;
    });
    return verified;
  };
  return createQuickJsProtocolAdapter({
    id: DOCKER_ADAPTER_ID,
    version: DOCKER_ADAPTER_VERSION,
    qualification: "production",
    isAvailable: async () => (await verify()) === undefined,
    launch: async () => {
      const why = await verify();
      if (why !== undefined) throw new Error(`the docker image did not verify: ${why}`);
      return containerTransport(checked);
    },
  });
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
