/**
 * The docker CLI calls of the container adapter, as pure functions: option checks, `docker run` arguments, and the
 * image and provenance digest checks. Nothing here runs docker; index.ts does.
 *
 * Rules: the CLI is an absolute path (PATH is never searched); the image is an exact `sha256:` image id (never a tag,
 * never pulled: `--pull=never`); its provenance label must carry the exact `sha256:` digest the host expects (that of
 * the SPDX document describing the image's root folder, see container-image.ts). A refused option is a `DockerConfigError`, a
 * TypeError as Mayura's are.
 */

import { countOption } from "../host/pool-options.ts";
import { type OptionErrors, optionKeys, refuseUnknownOptions } from "../platform/options.ts";

/** Label an image built for this adapter carries: the `sha256:` digest of the SPDX document of its root folder. */
export const PROVENANCE_LABEL = "dev.airlock.provenance";
/** Where the image keeps its root folder (see container-image.ts), and in it Airlock's container entry. */
export const CONTAINER_ROOT = "/opt/airlock";
export const CONTAINER_ENTRY = `${CONTAINER_ROOT}/node_modules/airlock-codemode/dist/docker/vm-side.js`;
export const CONTAINER_USER = "65534:65534";

const DIGEST = /^sha256:[0-9a-f]{64}$/;

export interface DockerLimits {
  /** `--pids-limit` (processes and threads). Default 64. */
  pids?: number;
  /** `--ulimit nofile=N:N`. Default 256. */
  openFiles?: number;
  /** `--cpus`. Default 1. */
  cpus?: number;
  /** `--memory` and `--memory-swap` (no swap), in bytes. Default 1 GiB. */
  memoryBytes?: number;
  /** Size of the noexec tmpfs at /tmp, in bytes. Default 16 MiB. */
  tmpfsBytes?: number;
}

export interface DockerSandboxOptions {
  /** Absolute path of the docker CLI. */
  dockerPath: string;
  /** The exact image id, `sha256:<64 hex>`. */
  image: string;
  /**
   * The exact digest the image's `dev.airlock.provenance` label must carry, `sha256:<64 hex>`: that of the SPDX
   * document describing the image's root folder.
   */
  provenance: string;
  /** Docker daemon (`--host`): `unix:///path`, `tcp://host:port` or `ssh://user@host`. Default: the CLI's. */
  host?: string;
  /** OCI runtime: `runsc` (gVisor) or `runc`. Default: the daemon's. */
  runtime?: "runsc" | "runc";
  /** Absolute path of a seccomp profile (JSON). Default: Docker's built-in profile; never `unconfined`. */
  seccompProfile?: string;
  limits?: DockerLimits;
  /**
   * Containers at once at most: one starts on first use, and another each time work arrives while every running one
   * computes (a program waits behind no CPU-bound program), up to this; the extra ones stop once idle. From 1 to
   * `MAX_ADAPTER_COUNT` (1024); default `PROTOCOL_MAX_CONNECTIONS` (4). Each takes up to `limits.memoryBytes` and
   * `limits.cpus`.
   */
  maxPoolSize?: number;
}

export interface CheckedDockerOptions
  extends Required<Omit<DockerSandboxOptions, "host" | "runtime" | "seccompProfile" | "maxPoolSize">> {
  maxPoolSize: number | undefined;
  host: string | undefined;
  runtime: "runsc" | "runc" | undefined;
  seccompProfile: string | undefined;
  limits: Required<DockerLimits>;
}

export const DEFAULT_DOCKER_LIMITS: Required<DockerLimits> = {
  pids: 64,
  openFiles: 256,
  cpus: 1,
  memoryBytes: 1024 * 1024 * 1024,
  tmpfsBytes: 16 * 1024 * 1024,
};

/** A refused docker adapter option; a TypeError, as Mayura's docker adapter throws. */
export class DockerConfigError extends TypeError {
  override readonly name = "DockerConfigError";
}

/** How the docker adapter reports a bad option: a DockerConfigError, as Mayura's docker adapter does. */
const DOCKER_OPTION_ERRORS: OptionErrors = Object.freeze({
  kind: (message: string) => new DockerConfigError(message),
  range: (message: string) => new DockerConfigError(message),
  showsValue: false,
});

const DOCKER_OPTION_KEYS = optionKeys<DockerSandboxOptions>({
  dockerPath: true,
  image: true,
  provenance: true,
  host: true,
  runtime: true,
  seccompProfile: true,
  limits: true,
  maxPoolSize: true,
});
const DOCKER_LIMIT_KEYS = optionKeys<DockerLimits>({
  pids: true,
  openFiles: true,
  cpus: true,
  memoryBytes: true,
  tmpfsBytes: true,
});

/** Checks the docker options; `extraKeys` are the further options of the adapter that calls it (checked there). */
export function checkDockerOptions(
  options: DockerSandboxOptions,
  extraKeys: readonly string[] = [],
): CheckedDockerOptions {
  if (options === null || typeof options !== "object") throw new DockerConfigError("options must be an object");
  // A misspelt `runTime` or `seccomp` would leave gVisor or the profile off without a word.
  refuseUnknownOptions(options, "the docker adapter", [...DOCKER_OPTION_KEYS, ...extraKeys], DOCKER_OPTION_ERRORS);
  const { dockerPath, image, provenance, host, runtime, seccompProfile } = options;
  if (typeof dockerPath !== "string" || !dockerPath.startsWith("/") || dockerPath.includes("\0")) {
    throw new DockerConfigError("dockerPath must be the absolute path of the docker CLI (PATH is never searched)");
  }
  if (typeof image !== "string" || !DIGEST.test(image)) {
    throw new DockerConfigError("image must be an exact image id, sha256:<64 lowercase hex> (tags are not accepted)");
  }
  if (typeof provenance !== "string" || !DIGEST.test(provenance)) {
    throw new DockerConfigError("provenance must be an exact digest, sha256:<64 lowercase hex>");
  }
  if (host !== undefined && (typeof host !== "string" || !/^(unix:\/\/\/|tcp:\/\/|ssh:\/\/)[^\s\0]+$/.test(host))) {
    throw new DockerConfigError("host must be unix:///path, tcp://host:port or ssh://user@host");
  }
  if (runtime !== undefined && runtime !== "runsc" && runtime !== "runc") {
    throw new DockerConfigError("runtime must be 'runsc' or 'runc'");
  }
  // A NUL would pass here and make every `docker run` spawn fail, with nothing naming the option.
  if (
    seccompProfile !== undefined &&
    (typeof seccompProfile !== "string" || !seccompProfile.startsWith("/") || seccompProfile.includes("\0"))
  ) {
    throw new DockerConfigError("seccompProfile must be the absolute path of a JSON profile");
  }
  const { maxPoolSize } = options;
  countOption(maxPoolSize, "maxPoolSize", DOCKER_OPTION_ERRORS);
  const limits = { ...DEFAULT_DOCKER_LIMITS };
  if (options.limits !== undefined) {
    if (options.limits === null || typeof options.limits !== "object" || Array.isArray(options.limits)) {
      throw new DockerConfigError("limits must be an object");
    }
    refuseUnknownOptions(options.limits, "limits", DOCKER_LIMIT_KEYS, DOCKER_OPTION_ERRORS, "limit");
    for (const key of DOCKER_LIMIT_KEYS as (keyof DockerLimits)[]) {
      const value = options.limits[key];
      if (value === undefined) continue;
      const ok =
        key === "cpus"
          ? typeof value === "number" && value > 0 && value <= 1024
          : Number.isSafeInteger(value) && value > 0;
      if (!ok) throw new DockerConfigError(`limits.${key} must be a positive ${key === "cpus" ? "number" : "integer"}`);
      limits[key] = value;
    }
  }
  return { dockerPath, image, provenance, host, runtime, seccompProfile, limits, maxPoolSize };
}

/** Global CLI options (before the command). */
export function globalArgs(options: CheckedDockerOptions): string[] {
  return options.host ? ["--host", options.host] : [];
}

/** `docker image inspect` of the exact image id; never pulls. */
export function inspectArgs(options: CheckedDockerOptions): string[] {
  return [...globalArgs(options), "image", "inspect", "--format", "{{json .}}", options.image];
}

/** `docker run` of one VM side in a fresh container that is removed when it stops. */
export function runArgs(options: CheckedDockerOptions, name: string): string[] {
  if (!/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/.test(name)) throw new DockerConfigError("invalid container name");
  const { limits } = options;
  return [
    ...globalArgs(options),
    "run",
    "--rm",
    "--interactive",
    "--name",
    name,
    "--pull=never",
    "--network=none",
    "--read-only",
    "--cap-drop=ALL",
    "--security-opt",
    "no-new-privileges",
    ...(options.seccompProfile ? ["--security-opt", `seccomp=${options.seccompProfile}`] : []),
    "--user",
    CONTAINER_USER,
    "--pids-limit",
    String(limits.pids),
    "--ulimit",
    `nofile=${limits.openFiles}:${limits.openFiles}`,
    "--ulimit",
    "core=0:0",
    "--cpus",
    String(limits.cpus),
    "--memory",
    String(limits.memoryBytes),
    "--memory-swap",
    String(limits.memoryBytes),
    "--tmpfs",
    `/tmp:rw,noexec,nosuid,nodev,size=${limits.tmpfsBytes}`,
    "--ipc=none",
    "--env",
    "NODE_OPTIONS=",
    ...(options.runtime ? [`--runtime=${options.runtime}`] : []),
    "--entrypoint",
    "node",
    options.image,
    CONTAINER_ENTRY,
  ];
}

/** `docker kill` of a container this adapter started. */
export function killArgs(options: CheckedDockerOptions, name: string): string[] {
  return [...globalArgs(options), "kill", name];
}

/**
 * Checks `docker image inspect --format '{{json .}}'` output against the options: the image id is exactly the one
 * asked for, and its provenance label carries exactly the expected digest. Returns why not, or undefined.
 */
export function checkImage(options: CheckedDockerOptions, inspectOutput: string): string | undefined {
  let info: { Id?: unknown; Config?: { Labels?: Record<string, unknown> | null } | null };
  try {
    info = JSON.parse(inspectOutput.trim());
  } catch {
    return "docker image inspect did not print JSON";
  }
  if (info === null || typeof info !== "object") return "docker image inspect did not print an object";
  if (info.Id !== options.image) return "the image id is not the one configured";
  const label = info.Config?.Labels?.[PROVENANCE_LABEL];
  if (label !== options.provenance) return `the image's ${PROVENANCE_LABEL} label is not the configured provenance`;
  return undefined;
}
