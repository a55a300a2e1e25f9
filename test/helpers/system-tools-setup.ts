/**
 * Vitest global set-up: a folder where the test files note which missing system tools they reported, so that a run
 * prints one line per missing tool however many files need it (see `system-tools.ts`).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { REPORTED_DIR_ENV } from "./system-tools.ts";

export default function setup(): () => void {
  const dir = mkdtempSync(join(tmpdir(), "airlock-system-tools-"));
  process.env[REPORTED_DIR_ENV] = dir;
  return () => rmSync(dir, { recursive: true, force: true });
}
