/**
 * Snapshots of paused program runs (see VmSnapshot): what a VM side captures when the host asks (the `snapshot`
 * command), and the image it restores a run from (RunRequest.restore). A snapshot is bound to the exact build that
 * made it by its key, the digest of the module's digest, the prelude's and the quickjs-wasi and QuickJS versions: a VM
 * side with another key never restores it (the run then starts from the beginning), since the memory of another build
 * means nothing to this one.
 */

import { base64ToBytes, bytesToBase64, sha256Hex } from "../platform/platform.ts";
import { imageOfPages } from "./image.ts";
import { MAX_SNAPSHOT_BYTES } from "./limits.ts";
import type { SnapshotRefusal, VmSnapshot } from "./protocol.ts";
import type { VmRun } from "./run.ts";
import type { VmImage } from "./vm.ts";

/** The key of the snapshots a VM side takes and restores, or null when its module carries no digest. */
export function snapshotKey(moduleDigest: string | undefined, image: VmImage): string | null {
  if (moduleDigest === undefined) return null;
  return sha256Hex(
    JSON.stringify({
      module: moduleDigest,
      prelude: image.preludeHash,
      "quickjs-wasi": image.versions["quickjs-wasi"] ?? "",
      quickjs: image.versions.quickjs ?? "",
    }),
  );
}

/**
 * Captures a run between two of its turns (nothing may be running): its VM's memory and its state, or why not. Only a
 * deterministic program run that waits on its calls is captured; `maxBytes` (a channel's limit, below
 * MAX_SNAPSHOT_BYTES) bounds its pages.
 */
export function captureRun(
  run: VmRun,
  key: string | null,
  maxBytes = MAX_SNAPSHOT_BYTES,
): VmSnapshot | SnapshotRefusal {
  const { request, vm } = run;
  if (request.deterministic === null || request.program === null || run.ended || run.pending.size === 0) {
    return "not_capturable";
  }
  if (key === null) return "unkeyed";
  const image = vm.currentImage;
  if (image === undefined || vm.broken) return "not_capturable";
  const pages = vm.pages(Math.min(maxBytes, MAX_SNAPSHOT_BYTES));
  if (pages === undefined) return "too_large";
  return {
    key,
    memory: {
      byteLength: pages.byteLength,
      stackPointer: pages.stackPointer,
      runtimePtr: pages.runtimePtr,
      contextPtr: pages.contextPtr,
      entries: { ...image.entries },
      ranges: pages.ranges,
      data: bytesToBase64(pages.data),
    },
    run: run.snapshotState(),
  };
}

/**
 * The image a snapshot's run continues from, or undefined when this VM side cannot restore it: another key, or
 * memory that does not decode (its shape was checked with the request).
 */
export function snapshotImage(snapshot: VmSnapshot, key: string | null, base: VmImage): VmImage | undefined {
  if (key === null || snapshot.key !== key) return undefined;
  const { memory } = snapshot;
  const data = base64ToBytes(memory.data);
  if (data === undefined) return undefined;
  const image = imageOfPages({ ...memory, data });
  if (image === undefined) return undefined;
  return { ...image, entries: { ...memory.entries }, preludeHash: base.preludeHash, versions: base.versions };
}
