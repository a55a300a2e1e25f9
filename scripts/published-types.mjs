// Run by `npm run build` after tsc: the declarations dist/ publishes, where tsc cannot write them as they are meant.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const dist = fileURLToPath(new URL("../dist/", import.meta.url));
const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));

// The root's `z` is a proxy that loads zod on first use; its declaration is zod's own `z` (a value and a namespace
// of types: `z.infer<typeof S>`), which a `const` cannot declare.
const zFile = join(dist, "tools", "z.d.ts");
const declared = "export declare const z: ZodNamespace;";
const zText = readFileSync(zFile, "utf8");
if (!zText.includes(declared)) throw new Error(`dist/tools/z.d.ts no longer declares "${declared}"`);
writeFileSync(zFile, zText.replace(declared, 'export { z } from "zod";'));

// A declaration that names an optional package (a peer, or an optional dependency an install may leave out) is
// marked so that a project without it still type-checks with `skipLibCheck: false`: what comes from the package is
// then `any`; with the package installed, the types are the package's own.
const optional = [
  ...Object.keys(pkg.optionalDependencies ?? {}),
  ...Object.entries(pkg.peerDependenciesMeta ?? {})
    .filter(([, meta]) => meta.optional)
    .map(([name]) => name),
];
const names = optional.map((name) => name.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")).join("|");
const fromOptional = new RegExp(`(?:from |import\\()"(?:${names})(?:/[^"]*)?"`);
for (const entry of readdirSync(dist, { recursive: true, withFileTypes: true })) {
  if (!entry.isFile() || !entry.name.endsWith(".d.ts")) continue;
  const file = join(entry.parentPath, entry.name);
  const lines = readFileSync(file, "utf8").split("\n");
  // Lines of code only: a doc comment may show an import.
  const code = (line) => !/^\s*(\*|\/\*|\/\/)/.test(line);
  const marked = lines.flatMap((line) =>
    code(line) && fromOptional.test(line) ? ["// @ts-ignore: an optional package", line] : [line],
  );
  if (marked.length !== lines.length) writeFileSync(file, marked.join("\n"));
}
