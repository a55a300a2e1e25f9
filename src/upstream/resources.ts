/**
 * The upstream servers' resources and prompts, as the gateway offers them: listed together (each named
 * `<server>__<name>`, like tools, with the name as the server gave it; a resource keeps its URI), and each read or get sent to the server it came from.
 * A resource URI is routed to the server that listed it (the first in config order when two list the same URI), else
 * to a server whose resource template matches it.
 */
import {
  ErrorCode,
  type GetPromptResult,
  McpError,
  type Prompt,
  type ReadResourceResult,
  type Resource,
  type ResourceTemplate,
} from "@modelcontextprotocol/sdk/types.js";
import type { McpUpstream } from "./server.ts";
import { MCP_TOOL_SEPARATOR } from "./tool-names.ts";
import type { McpToolset } from "./toolset.ts";
import { MAX_RESOURCE_URI_CHARS } from "./upstream-limits.ts";

/** The JSON-RPC error code of a resource that does not exist (the MCP specification's). */
export const RESOURCE_NOT_FOUND = -32002;

/** A prompt as the gateway lists it, and where it comes from. */
interface PromptRoute {
  server: string;
  name: string;
}

export class UpstreamResources {
  // What the latest lists said: each listing replaces them (a server that failed to list keeps its own), so that a
  // server listing new names each time does not grow them.
  private uris = new Map<string, string>();
  private templates: { server: string; pattern: TemplatePattern }[] = [];
  private prompts = new Map<string, PromptRoute>();

  constructor(private readonly toolset: McpToolset) {}

  /** The servers that are up and said they have resources (or prompts). */
  private serving(capability: "resources" | "prompts"): McpUpstream[] {
    return this.toolset.upstreams.filter((u) => u.down === undefined && u.capabilities?.[capability] !== undefined);
  }

  /** Every up server's resources, named `<server>__<name>`; a server that fails to list is left out. */
  async listResources(): Promise<Resource[]> {
    const listed = await Promise.allSettled(
      this.serving("resources").map(async (u) => [u, await u.listResources()] as const),
    );
    const out: Resource[] = [];
    const uris = kept(this.uris, listed, (server) => server);
    const seen = new Set<string>();
    for (const result of listed) {
      if (result.status === "rejected") continue;
      const [upstream, resources] = result.value;
      for (const resource of resources) {
        if (seen.has(resource.uri)) continue;
        seen.add(resource.uri);
        uris.set(resource.uri, upstream.name);
        out.push({
          ...resource,
          name: namespaced(upstream.name, resource.name),
          ...sourceOf(upstream.name, resource),
        });
      }
    }
    this.uris = uris;
    return out;
  }

  /** Every up server's resource templates, named `<server>__<name>`. */
  async listResourceTemplates(): Promise<ResourceTemplate[]> {
    const listed = await Promise.allSettled(
      this.serving("resources").map(async (u) => [u, await u.listResourceTemplates()] as const),
    );
    const out: ResourceTemplate[] = [];
    const templates: { server: string; pattern: TemplatePattern }[] = [];
    for (const result of listed) {
      if (result.status === "rejected") continue;
      const [upstream, list] = result.value;
      for (const template of list) {
        const pattern = templatePattern(template.uriTemplate);
        if (pattern !== undefined) templates.push({ server: upstream.name, pattern });
        out.push({
          ...template,
          name: namespaced(upstream.name, template.name),
          ...sourceOf(upstream.name, template),
        });
      }
    }
    this.templates = templates;
    return out;
  }

  /**
   * Reads a resource from the server that has it, or from `server` when given (as programs do). An unknown URI is
   * looked up again in fresh lists before it is refused with `RESOURCE_NOT_FOUND`.
   */
  async readResource(
    uri: string,
    options: { server?: string; signal?: AbortSignal } = {},
  ): Promise<ReadResourceResult> {
    const upstream =
      options.server === undefined
        ? await this.route(uri)
        : (this.toolset.upstream(options.server) ?? unknownServer(options.server, this.toolset));
    return upstream.readResource(uri, options.signal === undefined ? {} : { signal: options.signal });
  }

  /** Every up server's prompts, named `<server>__<name>`. */
  async listPrompts(): Promise<Prompt[]> {
    const listed = await Promise.allSettled(
      this.serving("prompts").map(async (u) => [u, await u.listPrompts()] as const),
    );
    const out: Prompt[] = [];
    const routes = kept(this.prompts, listed, (route) => route.server);
    for (const result of listed) {
      if (result.status === "rejected") continue;
      const [upstream, prompts] = result.value;
      for (const prompt of prompts) {
        const name = namespaced(upstream.name, prompt.name);
        if (routes.has(name) && routes.get(name)?.server !== upstream.name) continue;
        routes.set(name, { server: upstream.name, name: prompt.name });
        out.push({ ...prompt, name, ...sourceOf(upstream.name, prompt) });
      }
    }
    this.prompts = routes;
    return out;
  }

  /** Gets a prompt by its gateway name from the server it came from. */
  async getPrompt(
    name: string,
    args: Record<string, string> | undefined,
    signal?: AbortSignal,
  ): Promise<GetPromptResult> {
    if (!this.prompts.has(name)) await this.listPrompts();
    const route = this.prompts.get(name);
    if (route === undefined) throw new McpError(ErrorCode.InvalidParams, `Unknown prompt ${JSON.stringify(name)}`);
    const upstream = this.toolset.upstream(route.server) as McpUpstream;
    return upstream.getPrompt(route.name, args, signal === undefined ? {} : { signal });
  }

  private async route(uri: string): Promise<McpUpstream> {
    let server = this.uris.get(uri) ?? this.matchTemplate(uri);
    if (server === undefined) {
      await Promise.all([this.listResources(), this.listResourceTemplates()]);
      server = this.uris.get(uri) ?? this.matchTemplate(uri);
    }
    const upstream = server === undefined ? undefined : this.toolset.upstream(server);
    if (upstream === undefined) {
      throw new McpError(RESOURCE_NOT_FOUND, `Resource not found: no connected server has ${JSON.stringify(uri)}`, {
        uri,
      });
    }
    return upstream;
  }

  /**
   * The server of the first template that matches `uri`. Both are chosen by others (the template by a server, the URI
   * by a client), so the work is bounded: a template's literal start is compared first, and at most
   * MAX_TEMPLATE_CHECKS patterns, each linear in the URI, are tried.
   */
  private matchTemplate(uri: string): string | undefined {
    let checks = 0;
    for (const { server, pattern } of this.templates) {
      if (!uri.startsWith(pattern.prefix)) continue;
      if (pattern.test(uri)) return server;
      if (++checks === MAX_TEMPLATE_CHECKS) return undefined;
    }
    return undefined;
  }
}

/** The entries of `map` whose server was not listed this time (it failed to list): they stand until it lists again. */
function kept<T>(
  map: Map<string, T>,
  listed: PromiseSettledResult<readonly [McpUpstream, unknown]>[],
  serverOf: (value: T) => string,
): Map<string, T> {
  const fresh = new Set(listed.flatMap((result) => (result.status === "fulfilled" ? [result.value[0].name] : [])));
  return new Map([...map].filter(([, value]) => !fresh.has(serverOf(value))));
}

/** A resource's or prompt's name as the gateway lists it: `<server>__<name>`, the name as the server gave it. */
export function namespaced(server: string, name: string): string {
  return `${server}${MCP_TOOL_SEPARATOR}${name}`;
}

/** `_meta` naming the server a resource or prompt comes from. */
function sourceOf(server: string, item: { _meta?: Record<string, unknown> }): { _meta: Record<string, unknown> } {
  return { _meta: { ...(item._meta ?? {}), "dev.airlock/server": server } };
}

function unknownServer(server: string, toolset: McpToolset): never {
  const names = toolset.upstreams.map((u) => JSON.stringify(u.name)).join(", ");
  throw new McpError(
    ErrorCode.InvalidParams,
    `Unknown server ${JSON.stringify(server)} (the servers are ${names || "none"})`,
  );
}

/** Most characters, and variables, of a URI template that is matched: a larger one is listed but routes nothing. */
const MAX_TEMPLATE_CHARS = 512;
const MAX_TEMPLATE_VARIABLES = 16;
/** Most template patterns tried for one URI (those whose literal start it has). */
export const MAX_TEMPLATE_CHECKS = 8;

/** A URI template's expansions: the literal start they share, and the whole test. */
export interface TemplatePattern {
  prefix: string;
  /** Whether `uri` is one of the template's expansions. */
  test(uri: string): boolean;
}

/** A variable: a run of characters without `/` (`{var}` and most operators), or of any characters (`{+var}`, `{#var}`). */
const SEGMENT = -1;
const ANY = -2;

/**
 * The URIs an RFC 6570 template expands to: `{var}` one path segment (no `/`), `{+var}` and `{#var}` anything, other
 * operators a run of characters without `/`. Undefined for a template that is too large. A URI is matched by following
 * every way through the template at once, one character after the other (at most the template's length of ways,
 * so at most MAX_RESOURCE_URI_CHARS x MAX_TEMPLATE_CHARS steps): as a backtracking regular expression, `{a}{b}{c}` tried
 * every split of a URI that does not match (2,000 characters: 7 s), and 30 `{+var}` over 40 characters took 50 s.
 */
export function templatePattern(template: string): TemplatePattern | undefined {
  if (template.length > MAX_TEMPLATE_CHARS) return undefined;
  // Each unit: a character code to match, or a variable; two variables in a row are one (ANY if either is).
  const units: number[] = [];
  let rest = template;
  let variables = 0;
  const open = template.indexOf("{");
  const prefix = open === -1 ? template : template.slice(0, open);
  for (;;) {
    const open = rest.indexOf("{");
    const literal = open === -1 ? rest : rest.slice(0, open);
    for (let i = 0; i < literal.length; i++) units.push(literal.charCodeAt(i));
    if (open === -1) break;
    const close = rest.indexOf("}", open);
    if (close === -1 || ++variables > MAX_TEMPLATE_VARIABLES) return undefined;
    const operator = rest[open + 1];
    const variable = operator === "+" || operator === "#" ? ANY : SEGMENT;
    const last = units.length - 1;
    if (last >= 0 && (units[last] as number) < 0) units[last] = Math.min(units[last] as number, variable);
    else units.push(variable);
    rest = rest.slice(close + 1);
  }
  return { prefix, test: (uri) => uri.length <= MAX_RESOURCE_URI_CHARS && matches(units, uri) };
}

const SLASH = "/".charCodeAt(0);

/** Whether `uri` is what `units` expand to: the set of units reached so far, advanced by each character. */
function matches(units: readonly number[], uri: string): boolean {
  const end = units.length;
  // A state is how many units are matched. Each step moves the states of `from` (listed, and marked in `seen`) to
  // `to`; a variable may match nothing, so reaching it reaches the unit after it too.
  let from = { list: new Int32Array(end + 1), size: 0, seen: new Uint8Array(end + 1) };
  let to = { list: new Int32Array(end + 1), size: 0, seen: new Uint8Array(end + 1) };
  const reach = (set: typeof from, state: number) => {
    for (let at = state; at <= end && set.seen[at] === 0; at++) {
      set.seen[at] = 1;
      set.list[set.size++] = at;
      if (at === end || (units[at] as number) >= 0) break;
    }
  };
  reach(from, 0);
  for (let i = 0; i < uri.length && from.size > 0; i++) {
    const code = uri.charCodeAt(i);
    for (let k = 0; k < from.size; k++) {
      const state = from.list[k] as number;
      from.seen[state] = 0;
      if (state === end) continue;
      const unit = units[state] as number;
      if (unit === code) reach(to, state + 1);
      else if (unit === ANY || (unit === SEGMENT && code !== SLASH)) reach(to, state);
    }
    from.size = 0;
    [from, to] = [to, from];
  }
  return from.seen[end] === 1;
}
