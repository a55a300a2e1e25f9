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
import { MAX_RESOURCE_URI_CHARS } from "./limits.ts";
import { MCP_TOOL_SEPARATOR } from "./names.ts";
import type { McpToolset } from "./toolset.ts";
import type { McpUpstream } from "./upstream.ts";

/** The JSON-RPC error code of a resource that does not exist (the MCP specification's). */
export const RESOURCE_NOT_FOUND = -32002;

/** A prompt as the gateway lists it, and where it comes from. */
interface PromptRoute {
  server: string;
  name: string;
}

export class UpstreamResources {
  private readonly uris = new Map<string, string>();
  private templates: { server: string; pattern: TemplatePattern }[] = [];
  private readonly prompts = new Map<string, PromptRoute>();

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
    const seen = new Set<string>();
    for (const result of listed) {
      if (result.status === "rejected") continue;
      const [upstream, resources] = result.value;
      for (const resource of resources) {
        if (seen.has(resource.uri)) continue;
        seen.add(resource.uri);
        this.uris.set(resource.uri, upstream.name);
        out.push({
          ...resource,
          name: namespaced(upstream.name, resource.name),
          ...sourceOf(upstream.name, resource),
        });
      }
    }
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
    for (const result of listed) {
      if (result.status === "rejected") continue;
      const [upstream, prompts] = result.value;
      for (const prompt of prompts) {
        const name = namespaced(upstream.name, prompt.name);
        if (this.prompts.has(name) && this.prompts.get(name)?.server !== upstream.name) continue;
        this.prompts.set(name, { server: upstream.name, name: prompt.name });
        out.push({ ...prompt, name, ...sourceOf(upstream.name, prompt) });
      }
    }
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

  private matchTemplate(uri: string): string | undefined {
    return this.templates.find((template) => template.pattern.test(uri))?.server;
  }
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

/** Most characters of a URI template that is matched: a longer one is not (real templates are under 200). */
const MAX_TEMPLATE_CHARS = 512;

/** A URI template's expansions, as a sequence of literal characters and variables. */
export interface TemplatePattern {
  /** Whether `uri` is one of the template's expansions. */
  test(uri: string): boolean;
}

/** A variable: a run of characters without `/` (`{var}` and most operators), or of any characters (`{+var}`, `{#var}`). */
const SEGMENT = -1;
const ANY = -2;

/**
 * The URIs an RFC 6570 template expands to: `{var}` one path segment (no `/`), `{+var}` and `{#var}` anything, other
 * operators a run of characters without `/`. Undefined for a template that is too long. A URI is matched by following
 * every way through the template at once, one character after the other (at most the template's length of ways,
 * so at most MAX_RESOURCE_URI_CHARS x MAX_TEMPLATE_CHARS steps): as a regular expression, `{a}{b}{c}` tried every
 * split of a URI that does not match, and 2,000 characters took 7 s.
 */
export function templatePattern(template: string): TemplatePattern | undefined {
  if (template.length > MAX_TEMPLATE_CHARS) return undefined;
  // Each unit: a character code to match, or a variable; two variables in a row are one (ANY if either is).
  const units: number[] = [];
  let rest = template;
  for (;;) {
    const open = rest.indexOf("{");
    const literal = open === -1 ? rest : rest.slice(0, open);
    for (let i = 0; i < literal.length; i++) units.push(literal.charCodeAt(i));
    if (open === -1) break;
    const close = rest.indexOf("}", open);
    if (close === -1) return undefined;
    const operator = rest[open + 1];
    const variable = operator === "+" || operator === "#" ? ANY : SEGMENT;
    const last = units.length - 1;
    if (last >= 0 && (units[last] as number) < 0) units[last] = Math.min(units[last] as number, variable);
    else units.push(variable);
    rest = rest.slice(close + 1);
  }
  return { test: (uri) => uri.length <= MAX_RESOURCE_URI_CHARS && matches(units, uri) };
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
