/**
 * The package is `airlock-codemode` (npm serves an unrelated package as `airlock`) and its command is `airlock`:
 * every place that spells the installed package's name or path spells this one.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { CONTAINER_ENTRY } from "airlock-codemode/adapter-code-docker";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "./helpers/cli.ts";

const pkg = JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as {
  name: string;
  bin: Record<string, string>;
  peerDependencies?: Record<string, string>;
};
/** The README and the pages under docs/, one after another. */
const pages = [
  "README.md",
  ...readdirSync(join(REPO_ROOT, "docs"), { recursive: true, encoding: "utf8" })
    .filter((name) => name.endsWith(".md"))
    .map((name) => join("docs", name)),
]
  .map((page) => readFileSync(join(REPO_ROOT, page), "utf8"))
  .join("\n");

describe("the package name", () => {
  it("is airlock-codemode, with the airlock command", () => {
    expect(pkg.name).toBe("airlock-codemode");
    expect(Object.keys(pkg.bin)).toEqual(["airlock"]);
  });

  it("is where the container image installs the package, next to the entry it starts", () => {
    // The Dockerfile in the adapter's documentation installs the tarball into /opt/airlock.
    expect(CONTAINER_ENTRY).toBe(`/opt/airlock/node_modules/${pkg.name}/dist/docker/vm-side.js`);
  });

  it("is what the README and the docs tell a user to fetch", () => {
    // `npx -y <name>` fetches a package by name, `npx -y -p <name> -p <peer> <command>` each `-p`: only this one and
    // its peers. Plain `npx airlock` runs the installed command.
    const fetched: string[] = [];
    for (const m of pages.matchAll(
      /"-y",((?:\s*"-p",\s*"[^"]+",)*)\s*"([^"]+)"|npx -y((?: -p [@\w./-]+)*) ([@\w./-]+)/g,
    )) {
      const packages = [...(m[1] ?? m[3] ?? "").matchAll(/-p"?,?\s*"?([@\w./-]+)/g)].map((p) => p[1] as string);
      fetched.push(...(packages.length > 0 ? packages : [(m[2] ?? m[4]) as string]));
    }
    expect(fetched).toContain(pkg.name);
    const peers = Object.keys(pkg.peerDependencies ?? {});
    for (const name of fetched)
      expect(name === pkg.name || peers.includes(name) || name.startsWith("@modelcontextprotocol/"), name).toBe(true);
    expect(pages).not.toMatch(/from "airlock[/"]/);
  });
});
