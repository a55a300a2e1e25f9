/**
 * The container image, built from the installed package. Its provenance is Mayura's: the `sha256:` digest of an SPDX
 * document describing the image's root folder, which the image carries in its `dev.airlock.provenance` label and at
 * `/opt/airlock/sbom.spdx.json`. Rebuild the image whenever you upgrade airlock-codemode: the VM side inside must
 * match the adapter.
 *
 *   node -e "import('airlock-codemode/adapter-code-docker').then((m) => m.writeDockerBuildContext('airlock-image'))"
 *   syft dir:airlock-image/root -o spdx-json=airlock-image/sbom.spdx.json      # or another SPDX generator
 *   PROVENANCE=sha256:$(sha256sum airlock-image/sbom.spdx.json | cut -d' ' -f1)
 *   docker build --network=none --build-arg AIRLOCK_PROVENANCE=$PROVENANCE --iidfile image.id airlock-image
 *   # image: the content of image.id (sha256:…); provenance: $PROVENANCE
 *
 * `provenanceOfSpdx(readFileSync("airlock-image/sbom.spdx.json"))` checks that the file is an SPDX JSON document and
 * gives the same digest as the sha256sum line. Pin the Dockerfile's base image by digest (`FROM node:20-bookworm-slim@sha256:…`) for a reproducible build.
 */
import { createHash } from "node:crypto";
import { cpSync, mkdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { CONTAINER_ROOT, CONTAINER_USER, DockerConfigError, PROVENANCE_LABEL } from "./docker-cli.ts";

/** The package this file belongs to, as installed: its folder and npm name. */
const PACKAGE_ROOT = fileURLToPath(new URL("../..", import.meta.url));
const PACKAGE_NAME = "airlock-codemode";
/** The npm packages the container entry loads, besides this one (see the entry's imports). */
const RUNTIME_PACKAGES = ["quickjs-wasi"] as const;

/** The Dockerfile `writeDockerBuildContext` writes: the root folder and its SPDX document, labelled, as nobody. */
export const DOCKERFILE = `FROM node:20-bookworm-slim
ARG AIRLOCK_PROVENANCE
COPY root/ ${CONTAINER_ROOT}/
COPY sbom.spdx.json ${CONTAINER_ROOT}/sbom.spdx.json
LABEL ${PROVENANCE_LABEL}=$AIRLOCK_PROVENANCE
USER ${CONTAINER_USER}
`;

/**
 * Writes a docker build context into `directory`: `root/` (this package's `package.json` and `dist/`, and the packages
 * its container entry loads, under `root/node_modules/`) and the `Dockerfile`. Describe `root/` with an SPDX
 * generator into `sbom.spdx.json` next to them before `docker build`.
 */
export function writeDockerBuildContext(directory: string): { root: string; dockerfile: string } {
  if (typeof directory !== "string" || directory === "" || directory.includes("\0")) {
    throw new DockerConfigError("writeDockerBuildContext needs the path of a directory");
  }
  const root = join(directory, "root");
  const modules = join(root, "node_modules");
  const own = join(modules, PACKAGE_NAME);
  mkdirSync(own, { recursive: true });
  cpSync(join(PACKAGE_ROOT, "package.json"), join(own, "package.json"));
  cpSync(join(PACKAGE_ROOT, "dist"), join(own, "dist"), { recursive: true });
  const require = createRequire(import.meta.url);
  for (const name of RUNTIME_PACKAGES) {
    cpSync(dirname(require.resolve(`${name}/package.json`)), join(modules, name), { recursive: true });
  }
  writeFileSync(join(root, "package.json"), `${JSON.stringify({ private: true, type: "module" })}\n`);
  const dockerfile = join(directory, "Dockerfile");
  writeFileSync(dockerfile, DOCKERFILE);
  return { root, dockerfile };
}

/**
 * The provenance of an image: `sha256:` and the hex SHA-256 of its SPDX document's bytes, once they are checked to be
 * an SPDX JSON document (`spdxVersion` SPDX-2.x, `SPDXID` SPDXRef-DOCUMENT, a name, a namespace, creation info, and
 * the packages or files it describes).
 */
export function provenanceOfSpdx(document: string | Uint8Array): string {
  const text = typeof document === "string" ? document : Buffer.from(document).toString("utf8");
  let parsed: Record<string, unknown>;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new DockerConfigError("the SPDX document is not JSON (write it with an SPDX generator's spdx-json output)");
  }
  const ok =
    typeof parsed === "object" &&
    parsed !== null &&
    typeof parsed.spdxVersion === "string" &&
    /^SPDX-2\.\d+$/.test(parsed.spdxVersion) &&
    parsed.SPDXID === "SPDXRef-DOCUMENT" &&
    typeof parsed.name === "string" &&
    typeof parsed.documentNamespace === "string" &&
    typeof parsed.creationInfo === "object" &&
    parsed.creationInfo !== null &&
    (Array.isArray(parsed.packages) || Array.isArray(parsed.files));
  if (!ok) {
    throw new DockerConfigError(
      "the document is not an SPDX 2.x JSON document (spdxVersion, SPDXID, name, documentNamespace, creationInfo, packages or files)",
    );
  }
  const bytes = typeof document === "string" ? Buffer.from(document, "utf8") : document;
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}
