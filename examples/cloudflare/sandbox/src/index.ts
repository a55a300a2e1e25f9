// The sandbox Worker: the Durable Object that runs the VMs of the agent's RemoteCodemodeSandbox. It has no routes and
// keeps no state; Wrangler bundles QuickJS (about 900 KB, rewritten by Airlock's build) as a compiled wasm module.
export { CodemodeSandboxDurableObject as CodemodeSandbox } from "airlock-codemode/cloudflare";

export default {
  fetch: () => new Response("Not found", { status: 404 }),
};
