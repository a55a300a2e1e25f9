/**
 * The reset's zero-page helper: its embedded bytes are the assembly of its source, and it ends with exactly the
 * zeros the image has, writing only the pages that were not zero.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import wabtInit from "wabt";
import { ZERO_PAGES_WASM, zeroPagesFor } from "../dist/engine/wasm/zero-pages.js";

const PAGE = 4096;

describe("the zero-page helper", () => {
  it("is the assembly of src/engine/wasm/zero-pages.wat", async () => {
    const wabt = await wabtInit();
    const source = readFileSync(new URL("../src/engine/wasm/zero-pages.wat", import.meta.url), "utf8");
    const parsed = wabt.parseWat("zero-pages.wat", source, { simd: true, bulk_memory: true });
    parsed.validate();
    const { buffer } = parsed.toBinary({});
    parsed.destroy();
    expect(Buffer.from(ZERO_PAGES_WASM).equals(Buffer.from(buffer))).toBe(true);
  });

  it("zeroes the written pages of a range, counts them, and leaves everything else alone", () => {
    const memory = new WebAssembly.Memory({ initial: 2 });
    const zeroPages = zeroPagesFor(memory);
    expect(zeroPages).toBeDefined();
    const bytes = new Uint8Array(memory.buffer);
    // Page 1: its last byte; page 3: its first; page 5: one byte mid-page; page 0 and 31: outside the range.
    const written = [PAGE * 2 - 1, PAGE * 3, PAGE * 5 + 1234];
    for (const at of written) bytes[at] = 0xa5;
    bytes[10] = 7;
    bytes[PAGE * 31 + 5] = 9;
    expect(zeroPages?.(PAGE, PAGE * 31)).toBe(3);
    for (const at of written) expect(bytes[at]).toBe(0);
    expect(bytes[10]).toBe(7);
    expect(bytes[PAGE * 31 + 5]).toBe(9);
    // Nothing left to write: the second pass only reads.
    expect(zeroPages?.(PAGE, PAGE * 31)).toBe(0);
    expect(zeroPages?.(PAGE * 4, PAGE * 4)).toBe(0);
  });
});
