// Run by `npm run build` after tsc: the declarations dist/ publishes, where tsc cannot write them as they are meant.
// The root's `z` is a proxy that loads zod on first use; its declaration is zod's own `z` (a value and a namespace
// of types: `z.infer<typeof S>`), which a `const` cannot declare.
import { readFileSync, writeFileSync } from "node:fs";

const file = new URL("../dist/tools/z.d.ts", import.meta.url);
const declared = "export declare const z: ZodNamespace;";
const text = readFileSync(file, "utf8");
if (!text.includes(declared)) throw new Error(`dist/tools/z.d.ts no longer declares "${declared}"`);
writeFileSync(file, text.replace(declared, 'export { z } from "zod";'));
