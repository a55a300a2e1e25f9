/**
 * `airlock-codemode/portable`: what runs on any runtime with WebAssembly and Web APIs, with no `node:` module and no
 * file read from disk (Cloudflare Workers, Deno, browsers): the remote sandbox and its remote end
 * (`serveCodemodeRemote`), the sandbox on the calling thread (given a compiled QuickJS module), declarations, source
 * parsing, identifiers and the limits. On Cloudflare, `airlock-codemode/cloudflare` has all of it and adds the Durable
 * Object that runs the VMs, and QuickJS compiled by the bundler.
 */

export * from "./declarations/index.ts";
export {
  DEFAULT_INTERRUPT_BUDGET,
  DEFAULT_MAX_TOOL_CALLS,
  DEFAULT_REMOTE_MEMORY_LIMIT_BYTES,
  DEFAULT_TIMEOUT_MS,
  INLINE_MAX_STACK_SIZE,
  MAX_CLOCK_MS,
  MAX_ERROR_MESSAGE_CHARS,
  MAX_ERROR_NAME_CHARS,
  MAX_ERROR_STACK_CHARS,
  MAX_INTERRUPT_BUDGET,
  MAX_OUTPUT_CHARS,
  MAX_OUTPUT_ITEMS,
  MAX_STORE_TOTAL_CHARS,
  MAX_STORE_VALUE_CHARS,
  MAX_VALUE_CHARS,
} from "./engine/limits.ts";
export { MAX_EXCHANGE_BYTES, RPC_LIMIT_BYTES } from "./engine/rpc-bytes.ts";
export { MAX_BATCH_CHARS } from "./engine/serve.ts";
export { DEFAULT_VMS_PER_THREAD } from "./host/pool-options.ts";
export { InlineCodemodeSandbox, type InlineCodemodeSandboxOptions } from "./inline/sandbox.ts";
export { isIdentifier, toCodemodeIdentifier } from "./platform/identifier.ts";
export {
  type CodemodeRemote,
  REMOTE_BOOT_TIMEOUT_MS,
  REMOTE_POLL_MS,
  type RemoteSandboxStub,
} from "./remote/channel.ts";
export {
  type CodemodeServeOptions,
  RemoteCodemodeSandbox,
  type RemoteCodemodeSandboxOptions,
  serveCodemodeRemote,
} from "./remote/sandbox.ts";
export type {
  CodemodeRemoteExchange,
  CodemodeRemoteMessage,
  CodemodeRemoteReply,
  CodemodeRemoteRequest,
  RemoteExchange,
} from "./remote/vm-side.ts";
export { CodemodeSandboxBase, DEFAULT_MEMORY_LIMIT_BYTES, MIN_MEMORY_LIMIT_BYTES } from "./sandbox/base.ts";
export * from "./source/index.ts";
export type * from "./types.ts";
