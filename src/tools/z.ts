/**
 * Mayura's name for zod, which tool and program schemas are written in. zod is loaded on the first use of `z`, not
 * when this package is imported (zod alone takes longer to load than the rest of the root entry), and it is an
 * optional package: a script sandbox without typed tools never needs it.
 */
import type { z as Zod } from "zod";
import { isNotFound, missingPackage, nodeBuiltin, nodeRequire } from "../platform/platform.ts";

type ZodNamespace = typeof Zod;

let zod: ZodNamespace | undefined;

/**
 * zod's `z`, loaded on first call from where this package is installed. It is zod's ES module that is loaded
 * (`require` of an ES module: Node 20.19+, 22.12+, Bun), so it is the same instance as the application's
 * `import { z } from "zod"`; zod's CommonJS build would be a second copy. On older Node, the CommonJS build.
 */
export function loadZod(what = "z"): ZodNamespace {
  if (zod !== undefined) return zod;
  const load = nodeRequire(import.meta.url);
  const toPath = nodeBuiltin<{ fileURLToPath(url: string): string }>("url")?.fileURLToPath;
  if (load === undefined || toPath === undefined)
    throw new Error(`${what} needs Node or Bun: zod cannot be loaded here`);
  let module: { z?: ZodNamespace };
  try {
    try {
      const resolved = import.meta.resolve("zod");
      module = load(resolved.startsWith("file:") ? toPath(resolved) : resolved) as { z?: ZodNamespace };
    } catch (error) {
      if ((error as { code?: unknown }).code !== "ERR_REQUIRE_ESM") throw error;
      module = load("zod") as { z?: ZodNamespace };
    }
  } catch (error) {
    if (isNotFound(error)) throw missingPackage(what, { zod: "4" });
    throw error;
  }
  if (module.z === undefined) throw missingPackage(what, { zod: "4" });
  zod = module.z;
  return zod;
}

/**
 * `z` as zod exports it, loaded on its first use: every property read (`z.object`), `in` and key listing goes to
 * zod's own namespace. Its published declaration is zod's own `z` (scripts/published-types.mjs).
 */
export const z: ZodNamespace = new Proxy({} as ZodNamespace, {
  get: (_, key) => Reflect.get(loadZod(), key),
  has: (_, key) => key in loadZod(),
  ownKeys: () => Reflect.ownKeys(loadZod()),
  getOwnPropertyDescriptor: (_, key) => {
    const descriptor = Reflect.getOwnPropertyDescriptor(loadZod(), key);
    // A proxy may not report a property as fixed that its own (empty) target does not have.
    return descriptor === undefined ? undefined : { ...descriptor, configurable: true };
  },
  set: () => false,
  defineProperty: () => false,
  deleteProperty: () => false,
});
