/**
 * The digest of the exact wasm a VM runs, carried inside the module: `loadQuickJSWasm` appends it as a custom section
 * to the bytes it compiles (QuickJS's module after Airlock's rewrites), so that every VM side of every kind reads it
 * from the compiled module it was given, without the bytes. A snapshot of a VM is bound to it (snapshot.ts): one taken
 * on another build of the module is never restored. A module compiled by other means has none.
 */
import { sha256Hex } from "../../platform/platform.ts";
import { uleb } from "./binary.ts";

/** The custom section's name; its content is the hex SHA-256 of the module's bytes without it. */
export const MODULE_DIGEST_SECTION = "airlock.module-sha256";

const encoder = new TextEncoder();

/** The module's bytes with their digest appended as a custom section (one without effect on what the module does). */
export function withModuleDigest(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  const name = encoder.encode(MODULE_DIGEST_SECTION);
  const payload = [...uleb(name.length), ...name, ...encoder.encode(sha256Hex(bytes))];
  const section = [0, ...uleb(payload.length), ...payload];
  const out = new Uint8Array(bytes.byteLength + section.length);
  out.set(bytes);
  out.set(section, bytes.byteLength);
  return out;
}

const HEX_DIGEST = /^[0-9a-f]{64}$/;

/** The digest a module carries (see withModuleDigest), or undefined for a module without one. */
export function moduleDigestOf(module: WebAssembly.Module): string | undefined {
  const sections = WebAssembly.Module.customSections(module, MODULE_DIGEST_SECTION);
  if (sections.length !== 1) return undefined;
  const text = new TextDecoder().decode(sections[0] as ArrayBuffer);
  return HEX_DIGEST.test(text) ? text : undefined;
}
