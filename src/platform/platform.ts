/**
 * What the engine and the host take from the platform, without a `node:*` import: the VM side also runs in Cloudflare
 * Workers and other runtimes with Web APIs only (Web Crypto, TextEncoder, timers). Where Node offers a faster way it
 * is used when present, with the same result.
 */
type NodeProcess = { getBuiltinModule?: (id: string) => unknown };
const nodeProcess = (globalThis as { process?: NodeProcess }).process;

/**
 * One of Node's built-in modules where the runtime has them (Node, Bun), without a static `node:` import, which the
 * portable entry may not contain; undefined elsewhere (Workers without Node compatibility).
 */
export function nodeBuiltin<T>(
  id: "module" | "os" | "crypto" | "v8" | "vm" | "fs" | "url" | "worker_threads",
): T | undefined {
  return nodeProcess?.getBuiltinModule?.(id) as T | undefined;
}

const encoder = new TextEncoder();

type Hash = { update(data: Uint8Array): Hash; digest(): Uint8Array; digest(encoding: "hex"): string };
const nodeCrypto = nodeBuiltin<{ createHash(algorithm: "sha256"): Hash }>("crypto");

/** SHA-256 of a string's UTF-8 bytes (or of bytes), as raw bytes: Node's where there is one, else `sha256Portable`. */
export function sha256Bytes(input: string | Uint8Array): Uint8Array {
  const bytes = typeof input === "string" ? encoder.encode(input) : input;
  return nodeCrypto ? nodeCrypto.createHash("sha256").update(bytes).digest() : sha256Portable(bytes);
}

export function sha256Hex(input: string | Uint8Array): string {
  if (nodeCrypto) {
    const bytes = typeof input === "string" ? encoder.encode(input) : input;
    return nodeCrypto.createHash("sha256").update(bytes).digest("hex");
  }
  let hex = "";
  for (const byte of sha256Bytes(input)) hex += byte.toString(16).padStart(2, "0");
  return hex;
}

export function sha256Base64Url(input: string | Uint8Array): string {
  let binary = "";
  for (const byte of sha256Bytes(input)) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** SHA-256's round constants (FIPS 180-4, 4.2.2). */
const K = Uint32Array.from([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
  0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
  0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
  0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
  0xc67178f2,
]);

/**
 * SHA-256 in plain JavaScript (FIPS 180-4), for runtimes without Node's crypto (Workers): Web Crypto's digest is
 * asynchronous, and the configuration digests are taken synchronously. Checked against Node's in the tests.
 */
export function sha256Portable(data: Uint8Array): Uint8Array {
  const length = data.byteLength;
  const padded = new Uint8Array((((length + 8) >> 6) + 1) << 6);
  padded.set(data);
  padded[length] = 0x80;
  const view = new DataView(padded.buffer);
  view.setUint32(padded.byteLength - 8, Math.floor(length / 0x20000000));
  view.setUint32(padded.byteLength - 4, (length << 3) >>> 0);
  const h = Uint32Array.from([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  const w = new Uint32Array(64);
  const rotr = (x: number, n: number) => (x >>> n) | (x << (32 - n));
  for (let block = 0; block < padded.byteLength; block += 64) {
    for (let i = 0; i < 16; i++) w[i] = view.getUint32(block + i * 4);
    for (let i = 16; i < 64; i++) {
      const a = w[i - 15] as number;
      const b = w[i - 2] as number;
      const s0 = rotr(a, 7) ^ rotr(a, 18) ^ (a >>> 3);
      const s1 = rotr(b, 17) ^ rotr(b, 19) ^ (b >>> 10);
      w[i] = ((w[i - 16] as number) + s0 + (w[i - 7] as number) + s1) >>> 0;
    }
    let [a, b, c, d, e, f, g, hh] = h as unknown as number[];
    for (let i = 0; i < 64; i++) {
      const s1 = rotr(e as number, 6) ^ rotr(e as number, 11) ^ rotr(e as number, 25);
      const ch = ((e as number) & (f as number)) ^ (~(e as number) & (g as number));
      const t1 = ((hh as number) + s1 + ch + (K[i] as number) + (w[i] as number)) >>> 0;
      const s0 = rotr(a as number, 2) ^ rotr(a as number, 13) ^ rotr(a as number, 22);
      const maj = ((a as number) & (b as number)) ^ ((a as number) & (c as number)) ^ ((b as number) & (c as number));
      const t2 = (s0 + maj) >>> 0;
      hh = g;
      g = f;
      f = e;
      e = ((d as number) + t1) >>> 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) >>> 0;
    }
    const out = [a, b, c, d, e, f, g, hh] as number[];
    for (let i = 0; i < 8; i++) h[i] = ((h[i] as number) + (out[i] as number)) >>> 0;
  }
  const digest = new Uint8Array(32);
  const dv = new DataView(digest.buffer);
  for (let i = 0; i < 8; i++) dv.setUint32(i * 4, h[i] as number);
  return digest;
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
  from(bytes: ArrayBufferLike, offset: number, length: number): { toString(encoding: "base64"): string };
  from(text: string, encoding: "base64"): Uint8Array;
}
const nodeBuffer = (globalThis as { Buffer?: NodeBuffer }).Buffer;

/** Characters of base64 `btoa` gets at a time where there is no Buffer (a multiple of 3 bytes). */
const BASE64_CHUNK_BYTES = 3 * 8192;

/** Bytes as base64 text: Node's Buffer where there is one, else `btoa` in chunks. */
export function bytesToBase64(bytes: Uint8Array): string {
  if (nodeBuffer) return nodeBuffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
  let text = "";
  for (let at = 0; at < bytes.byteLength; at += BASE64_CHUNK_BYTES) {
    const chunk = bytes.subarray(at, Math.min(bytes.byteLength, at + BASE64_CHUNK_BYTES));
    text += btoa(String.fromCharCode(...chunk));
  }
  return text;
}

/**
 * Base64 text (padded, without white space) as bytes, or undefined when it is not base64: Node's Buffer, which skips
 * what is not base64, gives fewer bytes than the text's length says then; `atob` throws.
 */
export function base64ToBytes(text: string): Uint8Array | undefined {
  if (text.length % 4 !== 0) return undefined;
  const padding = text.endsWith("==") ? 2 : text.endsWith("=") ? 1 : 0;
  const expected = (text.length / 4) * 3 - padding;
  if (nodeBuffer) {
    const decoded = nodeBuffer.from(text, "base64");
    return decoded.byteLength === expected
      ? new Uint8Array(decoded.buffer, decoded.byteOffset, decoded.byteLength)
      : undefined;
  }
  let binary: string;
  try {
    binary = atob(text);
  } catch {
    return undefined;
  }
  if (binary.length !== expected) return undefined;
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

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

/** `require` for packages loaded on first use (amaro, zod), from `from` (an `import.meta.url`); undefined off Node. */
export function nodeRequire(from: string): ((id: string) => unknown) | undefined {
  return nodeBuiltin<{ createRequire(from: string): (id: string) => unknown }>("module")?.createRequire(from);
}

/**
 * The error for a part used without the optional packages it needs: `what` (written by Airlock) needs `packages`
 * (name to version range), with the command that installs them.
 */
export function missingPackage(what: string, packages: Record<string, string>): Error {
  const names = Object.keys(packages);
  const install = Object.entries(packages).map(([name, range]) => `${name}@${range}`);
  const needs =
    names.length === 1 ? `the package ${names[0]}, which is` : `the packages ${names.join(", ")}, which are`;
  return new Error(`${what} needs ${needs} optional: npm install ${install.join(" ")}`);
}

/** True for the error Node or Bun throw when a package (or a file of it) cannot be found. */
export function isNotFound(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === "MODULE_NOT_FOUND" || code === "ERR_MODULE_NOT_FOUND";
}

/**
 * Node's garbage collector, where the runtime lets it be reached: V8 frees a WebAssembly memory only once its object
 * is collected, and a dropped VM's tens of MiB would otherwise stay until the heap itself asks for a collection.
 * Reached on first need only (on Node, V8's expose-gc flag then also gives new `vm` contexts a `gc` global); Bun's
 * `Bun.gc`; null where the runtime has none (Workers).
 */
let collect: (() => void) | null | undefined;

function collector(): (() => void) | null {
  if (collect !== undefined) return collect;
  collect = null;
  const bun = (globalThis as { Bun?: { gc?(force: boolean): void } }).Bun;
  if (bun !== undefined) {
    if (typeof bun.gc === "function") collect = () => bun.gc?.(false);
    return collect;
  }
  const v8 = nodeBuiltin<{ setFlagsFromString(flags: string): void }>("v8");
  const vm = nodeBuiltin<{ runInNewContext(code: string): unknown }>("vm");
  if (!v8 || !vm) return collect;
  try {
    v8.setFlagsFromString("--expose-gc");
    const gc = vm.runInNewContext("gc");
    if (typeof gc === "function") collect = gc as () => void;
  } catch {
    // No collector: memory goes back when V8 collects by itself.
  }
  return collect;
}

/** Sandboxes starting now (see startingSandbox). */
let starting = 0;
const BASELINE_FLAG = "always-sparkplug";

/**
 * While a sandbox starts, V8 compiles each function straight to its baseline tier (Sparkplug) instead of interpreting
 * it until it is hot: the host paths of an execution, on the calling thread and in a worker (whose isolate reads the
 * same flags), are compiled by the first executions and keep that code. Without it a sandbox created without
 * `warm()` ran executions 4-33 at 3-4x its steady time, with it at 1.5x. The flag is the process's: functions of the
 * application compiled meanwhile get baseline code too (more code memory, no slower). Returns what ends this
 * sandbox's start (once); the flag is cleared when no sandbox is starting. Nothing on other runtimes, nor in a
 * process started with the flag.
 */
export function startingSandbox(): () => void {
  const v8 = nodeBuiltin<{ setFlagsFromString(flags: string): void }>("v8");
  const nodeOptions = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env
    ?.NODE_OPTIONS;
  const execArgv = (globalThis as { process?: { execArgv?: string[] } }).process?.execArgv ?? [];
  const given = [...execArgv, nodeOptions ?? ""].some((arg) => arg.includes(BASELINE_FLAG));
  if (!v8 || given || (globalThis as { Bun?: unknown }).Bun !== undefined) return () => {};
  if (starting++ === 0) v8.setFlagsFromString(`--${BASELINE_FLAG}`);
  let ended = false;
  return () => {
    if (ended) return;
    ended = true;
    if (--starting === 0) v8.setFlagsFromString(`--no-${BASELINE_FLAG}`);
  };
}

/** Collections asked for at most this often: a burst of dropped VMs is collected together. */
const COLLECT_EVERY_MS = 20;
let collectTimer: ReturnType<typeof setTimeout> | undefined;
let lastCollect = Number.NEGATIVE_INFINITY;

/** Asks for a garbage collection soon (once for a burst of calls), where the runtime allows it; else nothing. */
export function nudgeGarbageCollection(): void {
  const gc = collector();
  if (!gc || collectTimer !== undefined) return;
  const wait = Math.max(0, lastCollect + COLLECT_EVERY_MS - performance.now());
  collectTimer = setTimeout(() => {
    collectTimer = undefined;
    lastCollect = performance.now();
    gc();
  }, wait);
  collectTimer.unref?.();
}

type Fs = {
  openSync(path: string, flags: string): number;
  readSync(fd: number, buffer: Uint8Array, offset: number, length: number, position: number): number;
};
/** This thread's /proc schedstat, opened once per thread (a module is loaded once per thread); null: none here. */
let schedstat: { fd: number; buffer: Uint8Array } | null | undefined;

/**
 * Milliseconds the calling thread has computed so far (Linux's /proc: one read of a file opened once, a few us);
 * undefined where the system does not say. The kernel adds to it at its scheduler ticks and switches, so for a thread
 * computing now it lags by up to a tick (`SCHEDULER_TICK_MS`).
 */
export function threadCpuMs(): number | undefined {
  if (schedstat === undefined) {
    schedstat = null;
    try {
      const fs = nodeBuiltin<Fs>("fs");
      // /proc/thread-self names the thread that opens it: the descriptor reads this thread's figures from then on.
      if (fs) schedstat = { fd: fs.openSync("/proc/thread-self/schedstat", "r"), buffer: new Uint8Array(64) };
    } catch {
      // No /proc: no thread clock.
    }
  }
  if (schedstat === null) return undefined;
  try {
    const fs = nodeBuiltin<Fs>("fs") as Fs;
    const length = fs.readSync(schedstat.fd, schedstat.buffer, 0, schedstat.buffer.length, 0);
    // "<ns on a CPU> <ns waiting for one> <timeslices>"
    let ns = 0;
    for (let i = 0; i < length; i++) {
      const digit = (schedstat.buffer[i] as number) - 48;
      if (digit < 0 || digit > 9) break;
      ns = ns * 10 + digit;
    }
    return ns / 1e6;
  } catch {
    return undefined;
  }
}

/** The longest a thread's CPU time read from /proc lags behind: one scheduler tick (Linux's CONFIG_HZ 250). */
export const SCHEDULER_TICK_MS = 4;
