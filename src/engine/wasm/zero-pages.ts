/**
 * The reset's helper for the image's all-zero pages (the wasm stack region and the heap headroom, about 80% of the
 * image). Filling them with zeros every time writes megabytes that an execution mostly never touched, evicting the
 * cache the next execution runs on; checking them with SIMD loads and filling only the pages that are not zero ends
 * in the same bytes for about half the cost. The module is assembled from `zero-pages.wat` (a test checks the bytes).
 */

const ZERO_PAGES_WASM_BASE64 =
  "AGFzbQEAAAABBwFgAn9/AX8CDgECdm0GbWVtb3J5AgAAAwIBAAcNAQl6ZXJvUGFnZXMAAAqOAQGLAQMCfwF7AX8CQANAIAAgAU8NASAAIQIgAEGA" +
  "IGohA/0MAAAAAAAAAAAAAAAAAAAAACEEA0AgBCAC/QAEACAC/QAEEP1QIAL9AAQgIAL9AAQw/VD9UP1QIQQgAkHAAGohAiACIANJDQALIAT9UwRA" +
  "IABBAEGAIPwLACAFQQFqIQULIAMhAAwACwsgBQs=";

/** The assembled helper module, as bytes. */
export const ZERO_PAGES_WASM: Uint8Array<ArrayBuffer> = Uint8Array.from(atob(ZERO_PAGES_WASM_BASE64), (c) =>
  c.charCodeAt(0),
);

/** Zeroes every 4 KiB page of [from, to) that is not all zero and returns how many it wrote. */
export type ZeroPages = (from: number, to: number) => number;

let compiled: WebAssembly.Module | null | undefined;

/**
 * The helper bound to `memory`, or undefined where the engine has no wasm SIMD (the reset then fills the pages,
 * which ends in the same bytes, more slowly).
 */
export function zeroPagesFor(memory: WebAssembly.Memory): ZeroPages | undefined {
  if (compiled === undefined) {
    try {
      compiled = WebAssembly.validate(ZERO_PAGES_WASM) ? new WebAssembly.Module(ZERO_PAGES_WASM) : null;
    } catch {
      // A runtime that compiles no wasm at run time (Workers) fills the pages instead, with the same result.
      compiled = null;
    }
  }
  if (compiled === null) return undefined;
  const instance = new WebAssembly.Instance(compiled, { vm: { memory } });
  return instance.exports.zeroPages as ZeroPages;
}
