/**
 * Mayura's docker adapter suite (packages/adapter-code-docker/test/docker.test.ts), ported: refused configuration
 * is a TypeError; a promotion (a signed statement that the image passed a clean scan) is verified with node:crypto
 * for the exact image and provenance, and a missing, forged, stale or non-clean one runs nothing and says why; the
 * provenance is the digest of the SPDX document of the image's root folder, written from the installed package.
 * No Docker engine runs on this machine: the adapter runs against the recording stand-in for the CLI (see
 * fixtures.ts), which serves the container entry from the image root the build context holds.
 */
import { spawn } from "node:child_process";
import { generateKeyPairSync, sign } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  CONTAINER_ENTRY,
  CONTAINER_ROOT,
  createDockerQuickJsSandboxAdapter,
  createPromotedDockerQuickJsSandboxAdapter,
  DOCKERFILE,
  type DockerImagePromotionStatement,
  DockerPromotionError,
  issueDockerImagePromotion,
  PROMOTION_FORMAT,
  PROVENANCE_LABEL,
  provenanceOfSpdx,
  serializeDockerImagePromotion,
  verifyDockerImagePromotion,
  writeDockerBuildContext,
} from "airlock-codemode/adapter-code-docker";
import { createCodeMode } from "airlock-codemode/code-mode";
import { afterAll, describe, expect, it, vi } from "vitest";
import { GOOD_IMAGE, STAND_IN_IMAGE, STAND_IN_PROVENANCE, standInFolder } from "../../helpers/docker-stand-in.ts";
import { codeOf, double, options, program } from "./fixtures.ts";

const dockerPath = "/usr/bin/docker";
const image = STAND_IN_IMAGE;
const provenance = STAND_IN_PROVENANCE;
const standIns = standInFolder();
const contexts: string[] = [];
afterAll(() => {
  standIns.remove();
  for (const dir of contexts) rmSync(dir, { recursive: true, force: true });
});

/** A statement signed with a fresh Ed25519 key, and that key's public half as the host would pin it. */
function signedPromotion(overrides: Partial<DockerImagePromotionStatement> = {}, now = Date.now()) {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const statement: DockerImagePromotionStatement = {
    format: PROMOTION_FORMAT,
    subject: { image, provenance },
    builderId: "airlock-ci",
    scan: {
      scannerId: "scanner",
      scannerVersion: "1.2.3",
      reportDigest: `sha256:${"c".repeat(64)}`,
      completedAt: new Date(now - 2_000).toISOString(),
      critical: 0,
      high: 0,
      unknown: 0,
    },
    issuedAt: new Date(now - 1_000).toISOString(),
    expiresAt: new Date(now + 60_000).toISOString(),
    ...overrides,
  };
  const signature = sign(null, Buffer.from(serializeDockerImagePromotion(statement)), privateKey).toString("base64");
  return {
    statement,
    signature: `base64:${signature}`,
    publicKey: publicKey.export({ type: "spki", format: "pem" }).toString(),
  };
}

describe("docker adapter configuration", () => {
  it("needs an absolute CLI path and an exact image id and provenance, or throws a TypeError", () => {
    for (const bad of [
      { dockerPath: "docker", image, provenance },
      { dockerPath, image: "node:latest", provenance },
      { dockerPath, image: `sha256:${"A".repeat(64)}`, provenance },
      { dockerPath, image, provenance: "sha256:bad" },
      { dockerPath, image, provenance, runTime: "runsc" },
    ]) {
      expect(() => createDockerQuickJsSandboxAdapter(bad as never), JSON.stringify(bad)).toThrow(TypeError);
    }
    expect(() => createDockerQuickJsSandboxAdapter({ dockerPath, image, provenance })).not.toThrow();
  });
});

describe("promotion", () => {
  it("verifies a fresh, clean, Ed25519-signed statement for the exact image and provenance", () => {
    const proof = signedPromotion();
    expect(verifyDockerImagePromotion(proof, { image, provenance }, 30_000)).toEqual(proof.statement);
    expect(() =>
      createPromotedDockerQuickJsSandboxAdapter({ dockerPath, image, provenance, promotion: proof }),
    ).not.toThrow();
  });

  it("refuses a forged, altered, non-clean, stale, misdirected or ambiguous statement with a TypeError that says why", () => {
    const proof = signedPromotion();
    const expected = { image, provenance };
    const refusals: [string, () => unknown, RegExp][] = [
      [
        "a signature of zeros",
        () =>
          verifyDockerImagePromotion(
            { ...proof, signature: `base64:${Buffer.alloc(64).toString("base64")}` },
            expected,
          ),
        /forged/,
      ],
      [
        "a statement changed after signing",
        () =>
          verifyDockerImagePromotion(
            { ...proof, statement: { ...proof.statement, builderId: "someone-else" } },
            expected,
          ),
        /forged/,
      ],
      [
        "another signer's key",
        () => verifyDockerImagePromotion({ ...proof, publicKey: signedPromotion().publicKey }, expected),
        /forged/,
      ],
      [
        "another image",
        () => verifyDockerImagePromotion(proof, { image: `sha256:${"d".repeat(64)}`, provenance }),
        /another image or provenance/,
      ],
      [
        "findings",
        () => verifyDockerImagePromotion(signedPromotion({ scan: { ...proof.statement.scan, high: 1 } }), expected),
        /not clean/,
      ],
      ["a scan older than maxScanAgeMs", () => verifyDockerImagePromotion(proof, expected, 1), /stale/],
      [
        "an expired statement",
        () => verifyDockerImagePromotion(proof, expected, 30_000, Date.parse(proof.statement.expiresAt)),
        /expired/,
      ],
      [
        "a statement not yet valid",
        () => verifyDockerImagePromotion(proof, expected, 30_000, Date.parse(proof.statement.issuedAt) - 1),
        /not valid before/,
      ],
      ["an extra field", () => serializeDockerImagePromotion({ ...proof.statement, extra: true } as never), /exactly/],
      [
        "a getter",
        () =>
          verifyDockerImagePromotion(
            Object.defineProperty({ signature: proof.signature, publicKey: proof.publicKey }, "statement", {
              enumerable: true,
              get: () => proof.statement,
            }) as never,
            expected,
          ),
        /plain JSON/,
      ],
      ["no promotion at all", () => verifyDockerImagePromotion(undefined as never, expected), /required/],
    ];
    for (const [name, attempt, why] of refusals) {
      expect(attempt, name).toThrow(DockerPromotionError);
      expect(attempt, name).toThrow(TypeError);
      expect(attempt, name).toThrow(why);
    }
  });

  it("is issued only from a SARIF report without findings, with an Ed25519 key", () => {
    const { privateKey } = generateKeyPairSync("ed25519");
    const now = Date.now();
    const sarif = JSON.stringify({ version: "2.1.0", runs: [{ tool: { driver: { name: "scanner" } }, results: [] }] });
    const issuance = {
      sarif,
      image,
      provenance,
      builderId: "airlock-ci",
      scannerId: "scanner",
      scannerVersion: "1.20.4",
      completedAt: new Date(now - 2_000).toISOString(),
      issuedAt: new Date(now - 1_000).toISOString(),
      expiresAt: new Date(now + 60_000).toISOString(),
      privateKey: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
    };
    const proof = issueDockerImagePromotion(issuance);
    expect(verifyDockerImagePromotion(proof, { image, provenance }, 30_000)).toEqual(proof.statement);
    expect(proof.statement.scan.reportDigest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(() =>
      issueDockerImagePromotion({
        ...issuance,
        sarif: JSON.stringify({ version: "2.1.0", runs: [{ results: [{ ruleId: "CVE-1" }] }] }),
      }),
    ).toThrow(/finding/);
    const { privateKey: rsa } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    expect(() =>
      issueDockerImagePromotion({ ...issuance, privateKey: rsa.export({ type: "pkcs8", format: "pem" }).toString() }),
    ).toThrow(TypeError);
  });

  it("is required and checked by the promoted adapter before every execution: a stale one runs nothing", async () => {
    expect(() => createPromotedDockerQuickJsSandboxAdapter({ dockerPath, image, provenance } as never)).toThrow(
      /promotion is required/,
    );
    expect(() =>
      createPromotedDockerQuickJsSandboxAdapter({
        dockerPath,
        image,
        provenance,
        promotion: signedPromotion({ scan: { ...signedPromotion().statement.scan, critical: 2 } }),
      }),
    ).toThrow(/not clean/);

    // A statement valid for an hour: an execution now runs; one when the host's clock says it has expired does not.
    const docker = standIns.make(GOOD_IMAGE);
    const now = Date.now();
    const soon = signedPromotion({ expiresAt: new Date(now + 3_600_000).toISOString() }, now);
    const adapter = createPromotedDockerQuickJsSandboxAdapter({
      dockerPath: docker.path,
      image,
      provenance,
      promotion: soon,
    });
    const mode = createCodeMode({ adapter, invokeTool: () => ({ status: "succeeded", output: { value: 2 } }) });
    const first = await mode.execute(program("(input) => input.value + 1"), { value: 1 }, options());
    expect(first).toMatchObject({ status: "succeeded", output: 2 });
    const runsBefore = docker.calls().filter((argv) => argv.includes("run")).length;
    // Only the clock moves (Date), so that the check before the next execution sees the statement expired.
    vi.useFakeTimers({ toFake: ["Date"] });
    let late: Awaited<ReturnType<typeof mode.execute>>;
    try {
      vi.setSystemTime(Date.parse(soon.statement.expiresAt) + 1);
      late = await mode.execute(
        program(`async (input, tools) => tools.call("number.double", input)`, { tools: [double] }),
        { value: 1 },
        options(),
      );
    } finally {
      vi.useRealTimers();
    }
    expect(codeOf(late)).toBe("UNSUPPORTED_PROFILE");
    if (late.status !== "succeeded") expect(late.error.message).toMatch(/promotion is stale: it expired/);
    await adapter.close();
    expect(docker.calls().filter((argv) => argv.includes("run")).length).toBe(runsBefore);
  });
});

describe("provenance and the image's root folder", () => {
  it("writes a build context from the installed package whose root serves the container entry", async () => {
    const context = mkdtempSync(join(tmpdir(), "airlock-image-"));
    contexts.push(context);
    const { root, dockerfile } = writeDockerBuildContext(context);
    expect(readFileSync(dockerfile, "utf8")).toBe(DOCKERFILE);
    expect(DOCKERFILE).toContain(`LABEL ${PROVENANCE_LABEL}=$AIRLOCK_PROVENANCE`);
    expect(DOCKERFILE).toContain(`COPY root/ ${CONTAINER_ROOT}/`);
    const entry = join(root, CONTAINER_ENTRY.slice(CONTAINER_ROOT.length + 1));
    expect(existsSync(entry)).toBe(true);
    expect(existsSync(join(root, "node_modules", "quickjs-wasi", "quickjs.wasm"))).toBe(true);
    expect(JSON.parse(readFileSync(join(root, "node_modules", "airlock-codemode", "package.json"), "utf8")).name).toBe(
      "airlock-codemode",
    );
    // The entry boots from the root alone and says it is ready (a length-prefixed JSON frame on stdout).
    const child = spawn(process.execPath, [entry], { cwd: root, stdio: ["pipe", "pipe", "ignore"] });
    const hello = await new Promise<unknown>((resolve, reject) => {
      let buffered = Buffer.alloc(0);
      child.stdout.on("data", (chunk: Buffer) => {
        buffered = Buffer.concat([buffered, chunk]);
        if (buffered.length < 4) return;
        const length = buffered.readUInt32BE(0);
        if (buffered.length >= 4 + length) resolve(JSON.parse(buffered.subarray(4, 4 + length).toString("utf8")));
      });
      child.once("exit", (code) => reject(new Error(`the entry exited with ${code}`)));
    });
    child.kill("SIGKILL");
    expect(hello).toMatchObject({ type: "ready", protocol: "airlock.quickjs" });
  });

  it("is the sha256 of an SPDX JSON document, which is checked to be one", () => {
    const spdx = JSON.stringify({
      spdxVersion: "SPDX-2.3",
      dataLicense: "CC0-1.0",
      SPDXID: "SPDXRef-DOCUMENT",
      name: "airlock-image-root",
      documentNamespace: "https://example.com/spdx/airlock-image-root",
      creationInfo: { created: "2026-01-01T00:00:00Z", creators: ["Tool: example"] },
      packages: [],
    });
    const digest = provenanceOfSpdx(spdx);
    expect(digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(provenanceOfSpdx(Buffer.from(spdx))).toBe(digest);
    expect(() => provenanceOfSpdx("{}")).toThrow(TypeError);
    expect(() => provenanceOfSpdx("not json")).toThrow(TypeError);
  });
});
