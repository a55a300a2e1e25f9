/**
 * A recording stand-in for the docker CLI, for tests of the container adapter on machines without a Docker engine
 * (this one has none). It records every argv it is run with, answers `image inspect` with a fixed answer, and for
 * `run` serves Airlock's container entry over its own stdio, as the container would: by default the entry of this
 * checkout's dist/, or the one inside an image root that `writeDockerBuildContext` wrote.
 */
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { PROVENANCE_LABEL } from "airlock-codemode/adapter-code-docker";

const SERVE_ENTRY = fileURLToPath(new URL("../../dist/docker/vm-side.js", import.meta.url));
const STAND_IN = fileURLToPath(new URL("../fixtures/process/fake-docker.mjs", import.meta.url));

export const STAND_IN_IMAGE = `sha256:${"a".repeat(64)}`;
export const STAND_IN_PROVENANCE = `sha256:${"b".repeat(64)}`;
/** What `docker image inspect` prints for an image with the right id and provenance label. */
export const GOOD_IMAGE = { Id: STAND_IN_IMAGE, Config: { Labels: { [PROVENANCE_LABEL]: STAND_IN_PROVENANCE } } };

export interface DockerStandIn {
  /** The stand-in's absolute path, to pass as `dockerPath`. */
  readonly path: string;
  /** Every argv it was run with, in order. */
  calls(): string[][];
}

/** A folder for stand-ins; `remove()` deletes it and them. */
export function standInFolder(): { make(inspect: unknown, entry?: string): DockerStandIn; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), "airlock-docker-"));
  let count = 0;
  return {
    make(inspect: unknown, entry: string = SERVE_ENTRY): DockerStandIn {
      const name = `docker-${++count}`;
      const path = join(dir, name);
      const record = join(dir, `${name}.calls`);
      writeFileSync(record, "");
      const args = [record, inspect, entry].map((value) => JSON.stringify(value)).join(", ");
      writeFileSync(
        path,
        `#!${process.execPath}\nimport(${JSON.stringify(STAND_IN)}).then((m) => m.main(${args}, process.argv.slice(2)));\n`,
      );
      chmodSync(path, 0o755);
      const calls = () =>
        readFileSync(record, "utf8")
          .split("\n")
          .filter(Boolean)
          .map((line) => JSON.parse(line) as string[]);
      return { path, calls };
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** Resolves once `done()` holds, checking every 20 ms (the test's own timeout bounds the wait). */
export async function until(done: () => boolean): Promise<void> {
  while (!done()) await new Promise((resolve) => setTimeout(resolve, 20));
}
