export { CodemodeSandboxDurableObject as AirlockSandbox } from "airlock-codemode/cloudflare";
export default { fetch: () => new Response("Not found", { status: 404 }) };
