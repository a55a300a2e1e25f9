/**
 * The post-prelude image the build writes (engine/prebuilt-image.ts): the VMs of the installed module are made from
 * it, it is the image a boot makes, and a copy that is stale or altered is refused (the VMs then boot). The shared
 * and security suites run on VMs made from it, since every sandbox of the installed module uses it.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { InlineCodemodeSandbox } from "airlock-codemode";
import { afterAll, describe, expect, it } from "vitest";
import { type PrebuiltImage, prebuiltImage, vmImageOf } from "../dist/engine/prebuilt-image.js";
import { GuestVm, type VmImage } from "../dist/engine/vm.js";
import { loadQuickJSWasm } from "../dist/engine/wasm/load.js";

const DIST_ENGINE = new URL("../dist/engine/", import.meta.url);
const module = loadQuickJSWasm();
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** A copy of the build's two files in a directory of their own, `alter` applied to them first. */
function copyImage(alter: (files: { header: Record<string, unknown>; data: Buffer }) => void): URL {
  const dir = mkdtempSync(join(tmpdir(), "airlock-image-"));
  dirs.push(dir);
  const header = JSON.parse(readFileSync(new URL("quickjs-image.json", DIST_ENGINE), "utf8"));
  const data = readFileSync(new URL("quickjs-image.bin", DIST_ENGINE));
  const files = { header, data };
  alter(files);
  writeFileSync(join(dir, "quickjs-image.json"), JSON.stringify(files.header));
  writeFileSync(join(dir, "quickjs-image.bin"), files.data);
  return pathToFileURL(`${dir}/`);
}

/** Every byte of an image's memory, zero pages included. */
function bytesOf(image: VmImage): Uint8Array {
  const memory = new Uint8Array(image.byteLength);
  for (const segment of image.segments) if (!segment.zero) memory.set(segment.data, segment.from);
  return memory;
}

describe("the build's post-prelude image", () => {
  it("is the image a boot of the installed module makes, but for the one word the boot draws at random", async () => {
    const prebuilt = prebuiltImage(module) as PrebuiltImage;
    expect(prebuilt).toBeDefined();
    const image = vmImageOf(prebuilt) as VmImage;
    const { vm, image: booted } = await GuestVm.boot({ module, maxStackSize: 256 * 1024 });
    vm.dispose();
    expect({ ...image, segments: undefined }).toEqual({ ...booted, segments: undefined });
    const a = bytesOf(image);
    const b = bytesOf(booted);
    const differ: number[] = [];
    for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) differ.push(i);
    // _initialize stores 4 bytes of random_get beside errno; nothing else may differ.
    expect(differ.length).toBeLessThanOrEqual(4);
    if (differ.length > 0) expect((differ.at(-1) as number) - (differ[0] as number)).toBeLessThan(4);
  });

  it("makes VMs that run executions as booted ones do", async () => {
    const script = `return [Object.getOwnPropertyNames(globalThis).sort().join(), typeof tools, 2 ** 10, JSON.stringify({ a: [1] })]`;
    const inline = new InlineCodemodeSandbox();
    try {
      const result = await inline.execute(script);
      expect(result.ok).toBe(true);
      const booted = new InlineCodemodeSandbox({ wasm: loadQuickJSWasm(undefined, { trackWrites: false }) });
      try {
        expect(await booted.execute(script)).toEqual(result);
      } finally {
        await booted.close();
      }
    } finally {
      await inline.close();
    }
  });

  it("is refused when its bytes, its layout or its key are not the ones written", () => {
    expect(
      prebuiltImage(
        module,
        copyImage(() => {}),
      ),
    ).toBeDefined();
    const flipped = copyImage(({ data }) => {
      data[1000] = (data[1000] as number) ^ 1;
    });
    expect(prebuiltImage(module, flipped)).toBeUndefined();
    const moved = copyImage(({ header }) => {
      header.stackPointer = (header.stackPointer as number) - 16;
    });
    expect(prebuiltImage(module, moved)).toBeUndefined();
    const stale = copyImage(({ header }) => {
      header.key = "0".repeat(64);
    });
    expect(prebuiltImage(module, stale)).toBeUndefined();
    const torn = copyImage((files) => {
      files.data = files.data.subarray(0, 4096);
    });
    expect(prebuiltImage(module, torn)).toBeUndefined();
    const missing = copyImage(() => {});
    rmSync(new URL("quickjs-image.bin", missing));
    expect(prebuiltImage(module, missing)).toBeUndefined();
  });

  it("is not used for another module: an untracked one boots", () => {
    expect(prebuiltImage(loadQuickJSWasm(undefined, { trackWrites: false }))).toBeUndefined();
    const bare = new WebAssembly.Module(readFileSync(new URL("wasm/quickjs-tracked.wasm", DIST_ENGINE)));
    expect(prebuiltImage(bare)).toBeUndefined();
  });
});
