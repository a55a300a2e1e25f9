export { CodemodeSandboxDurableObject as PiSandbox } from "@earendil-works/pi-codemode/cloudflare";
export default { fetch: () => new Response("Not found", { status: 404 }) };
