/**
 * What the engine and the host take from the platform, without a `node:*` import: the VM side also runs in Cloudflare
 * Workers and other runtimes with Web APIs only (Web Crypto, TextEncoder, timers). Where Node offers a faster way it
 * is used when present, with the same result.
 */
import { sha256 } from "@noble/hashes/sha2.js";

const encoder = new TextEncoder();

/** SHA-256 of a string's UTF-8 bytes (or of bytes), as raw bytes. */
export function sha256Bytes(input: string | Uint8Array): Uint8Array {
  return sha256(typeof input === "string" ? encoder.encode(input) : input);
}

export function sha256Hex(input: string | Uint8Array): string {
  let hex = "";
  for (const byte of sha256Bytes(input)) hex += byte.toString(16).padStart(2, "0");
  return hex;
}

export function sha256Base64Url(input: string | Uint8Array): string {
  let binary = "";
  for (const byte of sha256Bytes(input)) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** Web Crypto fills at most this many bytes per call. */
const RANDOM_CHUNK_BYTES = 65_536;

/** Fills `bytes` from the platform's cryptographic generator. */
export function fillRandom(bytes: Uint8Array | Uint32Array): void {
  const view = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let at = 0; at < view.byteLength; at += RANDOM_CHUNK_BYTES) {
    crypto.getRandomValues(view.subarray(at, Math.min(view.byteLength, at + RANDOM_CHUNK_BYTES)));
  }
}

interface NodeBuffer {
  byteLength(value: string, encoding: "utf8"): number;
}
const nodeBuffer = (globalThis as { Buffer?: NodeBuffer }).Buffer;

/** The UTF-8 length of a string (lone surrogates count as the 3 bytes of U+FFFD, as an encoder writes them). */
export const utf8Length: (value: string) => number = nodeBuffer
  ? (value) => nodeBuffer.byteLength(value, "utf8")
  : (value) => {
      let bytes = 0;
      for (let i = 0; i < value.length; i++) {
        const code = value.charCodeAt(i);
        if (code < 0x80) bytes += 1;
        else if (code < 0x800) bytes += 2;
        else if (code >= 0xd800 && code <= 0xdbff && i + 1 < value.length) {
          const next = value.charCodeAt(i + 1);
          if (next >= 0xdc00 && next <= 0xdfff) {
            bytes += 4;
            i++;
          } else bytes += 3;
        } else bytes += 3;
      }
      return bytes;
    };

const nodeSetImmediate = (globalThis as { setImmediate?: (callback: () => void) => unknown }).setImmediate;

/**
 * Runs `callback` after the I/O and messages that are already waiting (Node's `setImmediate`; a zero timer where
 * there is none, as in Workers).
 */
export const runSoon: (callback: () => void) => void = nodeSetImmediate
  ? (callback) => {
      nodeSetImmediate(callback);
    }
  : (callback) => {
      setTimeout(callback, 0);
    };

type NodeProcess = { getBuiltinModule?: (id: string) => unknown };
const nodeProcess = (globalThis as { process?: NodeProcess }).process;

/**
 * One of Node's built-in modules where the runtime has them (Node, Bun), without a static `node:` import, which the
 * portable entry may not contain; undefined elsewhere (Workers without Node compatibility).
 */
export function nodeBuiltin<T>(id: "module" | "os"): T | undefined {
  return nodeProcess?.getBuiltinModule?.(id) as T | undefined;
}

/** `require` for packages loaded on first use (amaro, zod), from `from` (an `import.meta.url`); undefined off Node. */
export function nodeRequire(from: string): ((id: string) => unknown) | undefined {
  return nodeBuiltin<{ createRequire(from: string): (id: string) => unknown }>("module")?.createRequire(from);
}
