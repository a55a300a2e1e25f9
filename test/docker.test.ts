/**
 * `airlock-codemode/adapter-code-docker`: the docker CLI's arguments and the digest checks, against a recording stand-in for
 * the CLI that serves Airlock's container entry itself. A real container runs only where `docker info` succeeds.
 */
import { spawnSync } from "node:child_process";
import {
  CONTAINER_ENTRY,
  createDockerQuickJsSandboxAdapter,
  DockerConfigError,
  type DockerSandboxOptions,
  PROVENANCE_LABEL,
  verifyDockerImage,
} from "airlock-codemode/adapter-code-docker";
import { afterAll, describe, expect, it } from "vitest";
import { checkDockerOptions, runArgs } from "../dist/docker/docker-cli.js";
import {
  GOOD_IMAGE as goodImage,
  STAND_IN_IMAGE as IMAGE,
  STAND_IN_PROVENANCE as PROVENANCE,
  standInFolder,
  until,
} from "./helpers/docker-stand-in.ts";

const standIns = standInFolder();
afterAll(() => standIns.remove());
const fakeDocker = (inspect: unknown) => standIns.make(inspect);

const options = (dockerPath: string, extra: Partial<DockerSandboxOptions> = {}): DockerSandboxOptions => ({
  dockerPath,
  image: IMAGE,
  provenance: PROVENANCE,
  ...extra,
});

const LIMITS = {
  cpuMillis: 1_000,
  wallTimeMillis: 5_000,
  memoryBytes: 64 * 1024 * 1024,
  scratchBytes: 0,
  maxInputBytes: 10_000,
  maxOutputBytes: 10_000,
  maxToolInputBytes: 10_000,
  maxToolCalls: 10,
  maxToolConcurrency: 2,
};
const request = (source: string, input: unknown = {}) => ({
  program: {
    id: "p",
    version: "1",
    digest: `sha256:${"c".repeat(64)}`,
    language: "javascript" as const,
    source,
    javascript: source,
    approvedImports: [],
    limits: LIMITS,
  },
  input: input as never,
  inputJson: JSON.stringify(input),
  tools: {
    call: async (toolId: string, toolInput: unknown) => ({
      status: "succeeded" as const,
      output: { toolId, echoed: toolInput } as never,
    }),
  },
  signal: new AbortController().signal,
});

describe("docker CLI arguments", () => {
  it("runs the exact image id with no network, a read-only root, no capabilities and limits", () => {
    const args = runArgs(checkDockerOptions(options("/usr/bin/docker")), "airlock-test");
    expect(args).toEqual([
      "run",
      "--rm",
      "--interactive",
      "--name",
      "airlock-test",
      "--pull=never",
      "--network=none",
      "--read-only",
      "--cap-drop=ALL",
      "--security-opt",
      "no-new-privileges",
      "--user",
      "65534:65534",
      "--pids-limit",
      "64",
      "--ulimit",
      "nofile=256:256",
      "--ulimit",
      "core=0:0",
      "--cpus",
      "1",
      "--memory",
      String(1024 ** 3),
      "--memory-swap",
      String(1024 ** 3),
      "--tmpfs",
      `/tmp:rw,noexec,nosuid,nodev,size=${16 * 1024 * 1024}`,
      "--ipc=none",
      "--env",
      "NODE_OPTIONS=",
      "--entrypoint",
      "node",
      IMAGE,
      CONTAINER_ENTRY,
    ]);
    expect(args.join(" ")).not.toMatch(/unconfined|privileged|--network=host|--pull=always/);
  });

  it("adds the daemon, gVisor, a seccomp profile and custom limits when asked", () => {
    const args = runArgs(
      checkDockerOptions(
        options("/usr/bin/docker", {
          host: "unix:///run/docker.sock",
          runtime: "runsc",
          seccompProfile: "/etc/airlock/seccomp.json",
          limits: { pids: 16, openFiles: 32, cpus: 0.5, memoryBytes: 256 * 1024 * 1024, tmpfsBytes: 1024 },
        }),
      ),
      "airlock-x",
    );
    expect(args.slice(0, 3)).toEqual(["--host", "unix:///run/docker.sock", "run"]);
    expect(args).toContain("--runtime=runsc");
    expect(args).toContain("seccomp=/etc/airlock/seccomp.json");
    expect(args.join(" ")).toContain("--pids-limit 16 --ulimit nofile=32:32");
    expect(args.join(" ")).toContain(`--cpus 0.5 --memory ${256 * 1024 * 1024} --memory-swap ${256 * 1024 * 1024}`);
    expect(args).toContain("/tmp:rw,noexec,nosuid,nodev,size=1024");
    expect(args.at(-2)).toBe(IMAGE);
  });

  it.each([
    ["a relative CLI path", { dockerPath: "docker" }, /absolute path/],
    ["a tag instead of an image id", { image: "node:20" }, /exact image id/],
    ["a short digest", { image: "sha256:abc" }, /exact image id/],
    ["an uppercase digest", { image: `sha256:${"A".repeat(64)}` }, /exact image id/],
    ["a provenance that is not a digest", { provenance: "v1.2.3" }, /provenance must be an exact digest/],
    ["an unknown runtime", { runtime: "kata" }, /runtime must be/],
    ["a host with spaces", { host: "tcp://a b" }, /host must be/],
    ["a relative seccomp profile", { seccompProfile: "seccomp.json" }, /absolute path of a JSON profile/],
    ["a seccomp profile with a NUL byte", { seccompProfile: "/etc/airlock/seccomp.json\0" }, /^seccompProfile must be/],
    ["a zero limit", { limits: { pids: 0 } }, /limits.pids/],
    [
      "a misspelt runtime option",
      { runTime: "runsc" },
      /^the docker adapter has no option "runTime" \(it takes dockerPath, image, provenance, host, runtime, seccompProfile, limits, maxPoolSize\)$/,
    ],
    ["a misspelt seccomp option", { seccomp: "/etc/airlock/seccomp.json" }, /has no option "seccomp"/],
    [
      "a misspelt limit",
      { limits: { memory: 64 * 1024 * 1024 } },
      /^limits has no limit "memory" \(it takes pids, openFiles, cpus, memoryBytes, tmpfsBytes\)$/,
    ],
    ["limits that are a list", { limits: [] }, /limits must be an object/],
    ["no containers at all", { maxPoolSize: 0 }, /^maxPoolSize must be an integer from 1 to 1024$/],
    ["a fraction of a container", { maxPoolSize: 1.5 }, /^maxPoolSize must be an integer/],
    ["a count given as text", { maxPoolSize: "2" }, /^maxPoolSize must be an integer/],
  ])("refuses %s", (_, extra, message) => {
    expect(() => checkDockerOptions({ ...options("/usr/bin/docker"), ...(extra as object) })).toThrow(message);
    expect(() => checkDockerOptions({ ...options("/usr/bin/docker"), ...(extra as object) })).toThrow(
      DockerConfigError,
    );
    expect(() => createDockerQuickJsSandboxAdapter({ ...options("/usr/bin/docker"), ...(extra as object) })).toThrow(
      message,
    );
  });
});

describe("digest checks (against a recording stand-in for the CLI)", () => {
  it("accepts the exact image id and provenance label", async () => {
    const docker = fakeDocker(goodImage);
    expect(await verifyDockerImage(options(docker.path))).toBeUndefined();
    expect(docker.calls()).toEqual([["image", "inspect", "--format", "{{json .}}", IMAGE]]);
  });

  it.each([
    ["another image id", { ...goodImage, Id: `sha256:${"d".repeat(64)}` }, /image id is not the one configured/],
    ["no provenance label", { Id: IMAGE, Config: { Labels: null } }, /label is not the configured provenance/],
    [
      "another provenance",
      { Id: IMAGE, Config: { Labels: { [PROVENANCE_LABEL]: `sha256:${"e".repeat(64)}` } } },
      /label is not the configured provenance/,
    ],
    ["a missing image", null, /inspect failed/],
  ])("refuses %s, and never starts a container", async (_, inspect, message) => {
    const docker = fakeDocker(inspect);
    expect(await verifyDockerImage(options(docker.path))).toMatch(message);
    const adapter = createDockerQuickJsSandboxAdapter(options(docker.path));
    expect(await adapter.isAvailable()).toBe(false);
    const result = await adapter.execute(request("async (input) => input"));
    expect(result).toMatchObject({ status: "failed", reason: "sandbox_error" });
    await adapter.close();
    expect(docker.calls().some((argv) => argv.includes("run"))).toBe(false);
  });
});

describe("the adapter end to end (the stand-in serves the container entry)", () => {
  // A program that computes for a while (a few hundred milliseconds), so that work arriving meanwhile finds it busy.
  const COMPUTES = "async () => { let s = 0; for (let i = 0; i < 3e6; i++) s += i; return s; }";
  const runs = (docker: ReturnType<typeof fakeDocker>) => docker.calls().filter((argv) => argv.includes("run")).length;

  it.each([
    [undefined, 2],
    [1, 1],
  ])(
    "with maxPoolSize %s, a program arriving while another computes starts %i container(s) in all",
    async (max, containers) => {
      const docker = fakeDocker(goodImage);
      const adapter = createDockerQuickJsSandboxAdapter(
        options(docker.path, max === undefined ? {} : { maxPoolSize: max }),
      );
      // The first container is up before the long program starts.
      expect(await adapter.execute(request("async () => 1"))).toMatchObject({ status: "succeeded" });
      const computing = request(COMPUTES);
      // Limits with room to spare on a loaded machine: the program must end as it should, only later.
      const long = adapter.execute({
        ...computing,
        program: { ...computing.program, limits: { ...LIMITS, cpuMillis: 20_000, wallTimeMillis: 30_000 } },
      });
      await new Promise((resolve) => setTimeout(resolve, 60));
      const short = await adapter.execute(request("async () => 2"));
      expect(short).toMatchObject({ status: "succeeded" });
      const ended = await long;
      expect(ended, JSON.stringify(ended)).toMatchObject({ status: "succeeded" });
      expect(runs(docker)).toBe(containers);
      await adapter.close();
    },
  );

  it("runs programs, bridges tool calls, and stops the container on close", async () => {
    const docker = fakeDocker(goodImage);
    const adapter = createDockerQuickJsSandboxAdapter(options(docker.path, { runtime: "runsc" }));
    expect(adapter.id).toBe("airlock.quickjs-docker");
    expect(await adapter.isAvailable()).toBe(true);
    const result = await adapter.execute(
      request("async (input, tools) => ({ sum: input.a + input.b, tool: await tools.call('lookup', { q: 1 }) })", {
        a: 2,
        b: 3,
      }),
    );
    expect(result.status).toBe("succeeded");
    const output = "outputJson" in result ? JSON.parse(result.outputJson) : (result as { output: unknown }).output;
    expect(output).toEqual({ sum: 5, tool: { status: "succeeded", output: { toolId: "lookup", echoed: { q: 1 } } } });
    const failing = await adapter.execute(request("async () => { throw new TypeError('nope'); }"));
    expect(failing).toMatchObject({ status: "failed", reason: "program_error", programError: { name: "TypeError" } });
    await adapter.close();
    const run = docker.calls().find((argv) => argv.includes("run")) as string[];
    expect(run).toContain("--runtime=runsc");
    expect(run.at(-2)).toBe(IMAGE);
    const name = run[run.indexOf("--name") + 1];
    // The kill is a CLI process of its own, recorded once the stand-in has started.
    await until(() => docker.calls().some((argv) => argv[0] === "kill"));
    expect(docker.calls()).toContainEqual(["kill", name]);
  });
});

const dockerInfo = spawnSync("/usr/bin/docker", ["info"], { stdio: "ignore", timeout: 20_000 });
const dockerWorks = dockerInfo.status === 0;
if (!dockerWorks) {
  console.log("docker integration test: skipped, `docker info` did not succeed on this machine (no Docker engine)");
}

describe.runIf(dockerWorks && process.env.AIRLOCK_DOCKER_IMAGE && process.env.AIRLOCK_DOCKER_PROVENANCE)(
  "a real container (AIRLOCK_DOCKER_IMAGE / AIRLOCK_DOCKER_PROVENANCE, built as the module documents)",
  () => {
    it("runs a program and has no network", async () => {
      const adapter = createDockerQuickJsSandboxAdapter({
        dockerPath: "/usr/bin/docker",
        image: process.env.AIRLOCK_DOCKER_IMAGE as string,
        provenance: process.env.AIRLOCK_DOCKER_PROVENANCE as string,
      });
      expect(await adapter.isAvailable()).toBe(true);
      const result = await adapter.execute(request("async (input) => input.x * 2", { x: 21 }));
      expect(result).toMatchObject({ status: "succeeded" });
      await adapter.close();
    }, 120_000);
  },
);
