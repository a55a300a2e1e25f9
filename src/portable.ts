/**
 * `airlock-codemode/portable`: what runs on any runtime with WebAssembly and Web APIs, with no `node:` module and no
 * file read from disk (Cloudflare Workers, Deno, browsers): the remote sandbox and its remote end
 * (`serveCodemodeRemote`), the sandbox on the calling thread (given a compiled QuickJS module), declarations, source
 * parsing, identifiers and the limits. On Cloudflare, `airlock-codemode/cloudflare` has all of it and adds the Durable
 * Object that runs the VMs, and QuickJS compiled by the bundler.
 */

export * from "./declarations/index.ts";
export { MAX_EXCHANGE_BYTES } from "./engine/rpc-bytes.ts";
export { InlineCodemodeSandbox, type InlineCodemodeSandboxOptions } from "./inline/sandbox.ts";
export { isIdentifier, toCodemodeIdentifier } from "./platform/identifier.ts";
export type { CodemodeRemote } from "./remote/channel.ts";
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
} from "./remote/vm-side.ts";
export { CodemodeSandboxBase } from "./sandbox/base.ts";
export * from "./sandbox/public-limits.ts";
export * from "./source/index.ts";
export type * from "./types.ts";
