/** The parts of the Workers runtime this entry uses (full types: @cloudflare/workers-types). */
declare module "cloudflare:workers" {
  export abstract class DurableObject<Env = unknown> {
    protected ctx: unknown;
    protected env: Env;
    constructor(ctx: unknown, env: Env);
  }
}

/** A wasm import is a compiled module on Workers (Wrangler's and esbuild's CompiledWasm rule). */
declare module "*.wasm" {
  const module: WebAssembly.Module;
  export default module;
}
