/** What the engine takes from the platform without a node: import (platform/platform.ts), against Node's own. */
import { createHash, randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { sha256Base64Url, sha256Hex, sha256Portable, utf8Length } from "../dist/platform/platform.js";

describe("the portable SHA-256", () => {
  it("gives Node's digest at every padding boundary and for random data", () => {
    const lengths = [0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 65_537, 1_000_003];
    for (const length of lengths) {
      const data = randomBytes(length);
      const ours = Buffer.from(sha256Portable(new Uint8Array(data))).toString("hex");
      expect(ours, `${length} bytes`).toBe(createHash("sha256").update(data).digest("hex"));
    }
  });

  it("hashes strings as their UTF-8 bytes, lone surrogates as U+FFFD", () => {
    for (const text of ["", "abc", "héllo wörld ✓ 🎉", "lone \ud800 surrogate", "x".repeat(10_000)]) {
      expect(sha256Hex(text)).toBe(createHash("sha256").update(text, "utf8").digest("hex"));
      expect(sha256Base64Url(text)).toBe(createHash("sha256").update(text, "utf8").digest("base64url"));
      expect(utf8Length(text)).toBe(Buffer.byteLength(text, "utf8"));
    }
  });
});
