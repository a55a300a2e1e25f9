// A realistic tool catalog for the token benchmarks: the tool lists captured from real MCP servers
// (test/fixtures/schemas/mcp-server-*.json) topped up with generated SaaS-style tools (CRUD, search, pagination,
// enums, nested objects, nullable fields, output schemas) until it has the requested size.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const fixtures = join(dirname(fileURLToPath(import.meta.url)), "..", "test", "fixtures", "schemas");
const SERVERS = ["everything", "filesystem", "memory", "github"];

/** The tools of the captured MCP servers, as `{ name, description, inputSchema, outputSchema? }`. */
export function capturedTools() {
  return SERVERS.flatMap((server) => capturedToolsOf(server));
}

/** The tools of one captured MCP server. */
function capturedToolsOf(server) {
  const { tools } = JSON.parse(readFileSync(join(fixtures, `mcp-server-${server}.json`), "utf8"));
  return tools.map(({ name, description, inputSchema, outputSchema }) =>
    outputSchema === undefined ? { name, description, inputSchema } : { name, description, inputSchema, outputSchema },
  );
}

const id = (what) => ({ type: "string", description: `ID of the ${what}` });
const text = (description, extra = {}) => ({ type: "string", description, ...extra });
const timestamp = (description) => ({ type: "string", format: "date-time", description });
const money = { type: "integer", minimum: 0, description: "Amount in the smallest currency unit (cents)" };
const currency = { type: "string", pattern: "^[A-Z]{3}$", description: "ISO 4217 currency code", default: "USD" };
const email = { type: "string", format: "email", description: "Email address" };
const tags = { type: "array", items: { type: "string" }, uniqueItems: true, description: "Free-form labels" };
const address = {
  type: "object",
  description: "Postal address",
  properties: {
    line1: text("Street and number"),
    line2: { type: ["string", "null"], description: "Apartment, suite or floor" },
    city: text("City"),
    postalCode: text("Postal or ZIP code"),
    country: text("ISO 3166-1 alpha-2 country code", { minLength: 2, maxLength: 2 }),
  },
  required: ["line1", "city", "country"],
};

/** Services, their resources, and each resource's writable fields (`required` lists what creation needs). */
const SERVICES = [
  {
    prefix: "crm",
    product: "the CRM",
    resources: [
      {
        name: "contact",
        plural: "contacts",
        fields: {
          firstName: text("Given name"),
          lastName: text("Family name"),
          email,
          phone: text("Phone number in E.164 format", { pattern: "^\\+[1-9][0-9]{6,14}$" }),
          companyId: { type: ["string", "null"], description: "Company the contact works for" },
          lifecycleStage: { type: "string", enum: ["lead", "prospect", "customer", "churned"], default: "lead" },
          tags,
        },
        required: ["email"],
      },
      {
        name: "company",
        plural: "companies",
        fields: {
          name: text("Legal or trading name", { maxLength: 200 }),
          domain: text("Primary web domain, e.g. example.com", { format: "hostname" }),
          industry: text("Industry"),
          employees: { type: "integer", minimum: 1, description: "Head count" },
          address,
        },
        required: ["name"],
      },
      {
        name: "deal",
        plural: "deals",
        fields: {
          title: text("Short title of the deal"),
          amount: money,
          currency,
          stage: { type: "string", enum: ["qualification", "proposal", "negotiation", "won", "lost"] },
          closeDate: text("Expected close date", { format: "date" }),
          contactIds: { type: "array", items: { type: "string" }, description: "Contacts involved in the deal" },
        },
        required: ["title", "amount"],
      },
    ],
  },
  {
    prefix: "calendar",
    product: "the calendar",
    resources: [
      {
        name: "event",
        plural: "events",
        fields: {
          summary: text("Title of the event"),
          description: text("Longer description, plain text"),
          start: timestamp("Start time"),
          end: timestamp("End time; must be after start"),
          timeZone: text("IANA time zone, e.g. Europe/Paris", { default: "UTC" }),
          attendees: {
            type: "array",
            description: "People invited to the event",
            items: {
              type: "object",
              properties: {
                email,
                optional: { type: "boolean", default: false, description: "Whether attendance is optional" },
                responseStatus: { type: "string", enum: ["needsAction", "declined", "tentative", "accepted"] },
              },
              required: ["email"],
            },
          },
          recurrence: { type: "array", items: { type: "string" }, description: "RRULE lines (RFC 5545)" },
          visibility: { type: "string", enum: ["default", "public", "private"], default: "default" },
        },
        required: ["summary", "start", "end"],
      },
      {
        name: "calendar",
        plural: "calendars",
        fields: {
          title: text("Name of the calendar"),
          color: text("Display color as #RRGGBB", { pattern: "^#[0-9a-fA-F]{6}$" }),
          timeZone: text("IANA time zone"),
        },
        required: ["title"],
      },
    ],
  },
  {
    prefix: "helpdesk",
    product: "the help desk",
    resources: [
      {
        name: "ticket",
        plural: "tickets",
        fields: {
          subject: text("One-line summary of the problem", { maxLength: 150 }),
          body: text("First message of the ticket, Markdown"),
          priority: { type: "string", enum: ["low", "normal", "high", "urgent"], default: "normal" },
          status: { type: "string", enum: ["new", "open", "pending", "solved", "closed"] },
          requesterEmail: email,
          assigneeId: { type: ["string", "null"], description: "Agent the ticket is assigned to" },
          tags,
          customFields: {
            type: "object",
            additionalProperties: { type: ["string", "number", "boolean"] },
            description: "Values of account-specific custom fields, by field key",
          },
        },
        required: ["subject", "body", "requesterEmail"],
      },
      {
        name: "macro",
        plural: "macros",
        fields: {
          title: text("Name of the macro"),
          actions: {
            type: "array",
            minItems: 1,
            description: "Changes the macro applies to a ticket",
            items: {
              type: "object",
              properties: { field: text("Ticket field to change"), value: { description: "New value" } },
              required: ["field", "value"],
            },
          },
          active: { type: "boolean", default: true },
        },
        required: ["title", "actions"],
      },
    ],
  },
  {
    prefix: "billing",
    product: "billing",
    resources: [
      {
        name: "invoice",
        plural: "invoices",
        fields: {
          customerId: id("customer"),
          lines: {
            type: "array",
            minItems: 1,
            description: "Invoice lines",
            items: {
              type: "object",
              properties: {
                description: text("What is billed"),
                quantity: { type: "integer", minimum: 1, default: 1 },
                unitAmount: money,
              },
              required: ["description", "unitAmount"],
            },
          },
          currency,
          dueDate: text("Payment due date", { format: "date" }),
          memo: { type: ["string", "null"], description: "Note printed on the invoice" },
        },
        required: ["customerId", "lines"],
      },
      {
        name: "customer",
        plural: "customers",
        fields: {
          name: text("Customer name"),
          email,
          address,
          taxId: { type: ["string", "null"], description: "VAT or other tax number" },
          metadata: { type: "object", additionalProperties: { type: "string" }, description: "Your own key/values" },
        },
        required: ["name", "email"],
      },
      {
        name: "subscription",
        plural: "subscriptions",
        fields: {
          customerId: id("customer"),
          planId: id("plan"),
          quantity: { type: "integer", minimum: 1, default: 1 },
          trialDays: { type: "integer", minimum: 0, maximum: 90 },
          cancelAtPeriodEnd: { type: "boolean", default: false },
        },
        required: ["customerId", "planId"],
      },
    ],
  },
  {
    prefix: "storage",
    product: "object storage",
    resources: [
      {
        name: "bucket",
        plural: "buckets",
        fields: {
          name: text("Globally unique bucket name", { pattern: "^[a-z0-9.-]{3,63}$" }),
          region: { type: "string", enum: ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-1"] },
          versioning: { type: "boolean", default: false },
          publicAccess: { type: "string", enum: ["private", "public-read"], default: "private" },
        },
        required: ["name", "region"],
      },
      {
        name: "object",
        plural: "objects",
        fields: {
          bucket: text("Bucket name"),
          key: text("Object key (path inside the bucket)", { maxLength: 1024 }),
          contentType: text("MIME type", { default: "application/octet-stream" }),
          content: text("Content, base64-encoded", { contentEncoding: "base64" }),
          cacheControl: { type: ["string", "null"] },
        },
        required: ["bucket", "key", "content"],
      },
    ],
  },
  {
    prefix: "chat",
    product: "team chat",
    resources: [
      {
        name: "channel",
        plural: "channels",
        fields: {
          name: text("Channel name without #", { pattern: "^[a-z0-9_-]{1,80}$" }),
          topic: text("Channel topic"),
          isPrivate: { type: "boolean", default: false },
          memberIds: { type: "array", items: { type: "string" }, description: "Users to add" },
        },
        required: ["name"],
      },
      {
        name: "message",
        plural: "messages",
        fields: {
          channelId: id("channel"),
          text: text("Message text, Markdown", { maxLength: 4000 }),
          threadId: { type: ["string", "null"], description: "Reply in this thread" },
          attachments: {
            type: "array",
            items: {
              type: "object",
              properties: { title: text("Title"), url: text("Link", { format: "uri" }), imageUrl: { type: "string" } },
              required: ["url"],
            },
          },
        },
        required: ["channelId", "text"],
      },
    ],
  },
  {
    prefix: "deploy",
    product: "the deployment platform",
    resources: [
      {
        name: "service",
        plural: "services",
        fields: {
          name: text("Service name"),
          image: text("Container image reference, e.g. ghcr.io/acme/api:1.4.2"),
          replicas: { type: "integer", minimum: 0, maximum: 50, default: 1 },
          env: { type: "object", additionalProperties: { type: "string" }, description: "Environment variables" },
          ports: {
            type: "array",
            items: { type: "array", prefixItems: [{ type: "integer" }, { enum: ["tcp", "udp"] }], items: false },
            description: "[port, protocol] pairs",
          },
          healthCheck: {
            type: "object",
            properties: {
              path: text("HTTP path probed", { default: "/healthz" }),
              intervalSeconds: { type: "integer", minimum: 1, default: 10 },
            },
          },
        },
        required: ["name", "image"],
      },
      {
        name: "secret",
        plural: "secrets",
        fields: {
          name: text("Secret name", { pattern: "^[A-Z][A-Z0-9_]*$" }),
          value: text("Secret value; never returned by reads", { writeOnly: true }),
          serviceIds: { type: "array", items: { type: "string" }, description: "Services that receive the secret" },
        },
        required: ["name", "value"],
      },
    ],
  },
  {
    prefix: "analytics",
    product: "product analytics",
    resources: [
      {
        name: "report",
        plural: "reports",
        fields: {
          title: text("Report title"),
          metric: { type: "string", enum: ["pageviews", "sessions", "signups", "revenue", "retention"] },
          dateRange: {
            type: "object",
            properties: { from: text("First day", { format: "date" }), to: text("Last day", { format: "date" }) },
            required: ["from", "to"],
          },
          groupBy: { type: "array", items: { enum: ["day", "week", "country", "device", "campaign"] }, maxItems: 3 },
          filters: {
            type: "array",
            items: {
              type: "object",
              properties: {
                property: text("Event property"),
                operator: { enum: ["eq", "neq", "contains", "gt", "lt"] },
                value: { type: ["string", "number", "boolean"] },
              },
              required: ["property", "operator", "value"],
            },
          },
        },
        required: ["title", "metric", "dateRange"],
      },
      {
        name: "dashboard",
        plural: "dashboards",
        fields: {
          title: text("Dashboard title"),
          reportIds: { type: "array", items: { type: "string" }, description: "Reports shown, in order" },
          shared: { type: "boolean", default: false },
        },
        required: ["title"],
      },
    ],
  },
  {
    prefix: "docs",
    product: "the team wiki",
    resources: [
      {
        name: "page",
        plural: "pages",
        fields: {
          title: text("Page title", { maxLength: 255 }),
          markdown: text("Page body in Markdown"),
          folderId: { type: ["string", "null"], description: "Folder holding the page; null for the root" },
          published: { type: "boolean", default: false },
        },
        required: ["title"],
      },
      {
        name: "folder",
        plural: "folders",
        fields: {
          name: text("Folder name"),
          parentId: { type: ["string", "null"], description: "Parent folder; null for the root" },
        },
        required: ["name"],
      },
      {
        name: "article",
        plural: "articles",
        fields: {
          title: text("Help-center article title"),
          body: text("Article body, HTML"),
          locale: text("Locale, e.g. en-US", { default: "en-US" }),
          sectionId: id("section"),
        },
        required: ["title", "body", "sectionId"],
      },
    ],
  },
  {
    prefix: "hr",
    product: "the HR system",
    resources: [
      {
        name: "employee",
        plural: "employees",
        fields: {
          fullName: text("Full name"),
          workEmail: email,
          department: { type: "string", enum: ["engineering", "sales", "support", "finance", "people"] },
          managerId: { type: ["string", "null"], description: "Manager's employee ID" },
          startDate: text("First working day", { format: "date" }),
          address,
        },
        required: ["fullName", "workEmail", "department"],
      },
      {
        name: "leave_request",
        plural: "leave_requests",
        fields: {
          employeeId: id("employee"),
          kind: { type: "string", enum: ["vacation", "sick", "parental", "unpaid"] },
          from: text("First day off", { format: "date" }),
          to: text("Last day off", { format: "date" }),
          halfDay: { type: "boolean", default: false },
          note: { type: ["string", "null"] },
        },
        required: ["employeeId", "kind", "from", "to"],
      },
    ],
  },
];

const pick = (object, keys) => Object.fromEntries(keys.filter((k) => k in object).map((k) => [k, object[k]]));

function resourceSchema(resource) {
  return {
    type: "object",
    properties: {
      id: id(resource.name),
      ...resource.fields,
      createdAt: timestamp("When it was created"),
      updatedAt: timestamp("When it was last changed"),
    },
    required: ["id", ...resource.required, "createdAt", "updatedAt"],
  };
}

function toolsOf(service, resource) {
  const { prefix, product } = service;
  const { name, plural, fields, required } = resource;
  const object = resourceSchema(resource);
  const enumFields = Object.keys(fields).filter((key) => Array.isArray(fields[key].enum));
  return [
    {
      name: `${prefix}_list_${plural}`,
      description: `List ${plural} in ${product}, newest first. Results are paginated: pass the returned nextCursor to get the next page.`,
      inputSchema: {
        type: "object",
        properties: {
          limit: { type: "integer", minimum: 1, maximum: 100, default: 20, description: "Page size" },
          cursor: { type: "string", description: "Cursor from a previous page" },
          ...pick(fields, enumFields),
          updatedSince: timestamp(`Only ${plural} changed after this time`),
          sort: { type: "string", enum: ["createdAt", "updatedAt"], default: "createdAt" },
          order: { type: "string", enum: ["asc", "desc"], default: "desc" },
        },
      },
      outputSchema: {
        type: "object",
        properties: { items: { type: "array", items: object }, nextCursor: { type: ["string", "null"] } },
        required: ["items", "nextCursor"],
      },
    },
    {
      name: `${prefix}_get_${name}`,
      description: `Get one ${name} of ${product} by ID, with all its fields.`,
      inputSchema: { type: "object", properties: { id: id(name) }, required: ["id"] },
      outputSchema: object,
    },
    {
      name: `${prefix}_create_${name}`,
      description: `Create a ${name} in ${product}. Returns the created ${name} with its ID.`,
      inputSchema: { type: "object", properties: fields, required },
      outputSchema: object,
    },
    {
      name: `${prefix}_update_${name}`,
      description: `Update fields of an existing ${name} in ${product}. Fields left out keep their value.`,
      inputSchema: { type: "object", properties: { id: id(name), ...fields }, required: ["id"] },
      outputSchema: object,
    },
    {
      name: `${prefix}_delete_${name}`,
      description: `Delete a ${name} from ${product}. This cannot be undone.`,
      inputSchema: {
        type: "object",
        properties: {
          id: id(name),
          force: { type: "boolean", default: false, description: "Delete even if other records refer to it" },
        },
        required: ["id"],
      },
      outputSchema: { type: "object", properties: { deleted: { type: "boolean" } }, required: ["deleted"] },
    },
    {
      name: `${prefix}_search_${plural}`,
      description: `Full-text search over ${plural} in ${product}. Matches names, descriptions and tags; best matches first.`,
      inputSchema: {
        type: "object",
        properties: {
          query: text("Search terms", { minLength: 1 }),
          limit: { type: "integer", minimum: 1, maximum: 50, default: 10 },
        },
        required: ["query"],
      },
      outputSchema: {
        type: "object",
        properties: {
          hits: {
            type: "array",
            items: {
              type: "object",
              properties: { id: id(name), score: { type: "number" }, snippet: { type: "string" } },
              required: ["id", "score"],
            },
          },
        },
        required: ["hits"],
      },
    },
  ];
}

/** All generated tools, interleaved across services so that any prefix of the list mixes domains. */
export function generatedTools() {
  const perResource = SERVICES.flatMap((service) => service.resources.map((resource) => toolsOf(service, resource)));
  const tools = [];
  for (let verb = 0; verb < 6; verb++) for (const list of perResource) tools.push(list[verb]);
  return tools;
}

/** A catalog of `size` tools: every captured MCP tool first, then generated ones. */
export function buildCatalog(size = 200) {
  const captured = capturedTools();
  const generated = generatedTools();
  if (captured.length + generated.length < size) throw new Error(`cannot build a catalog of ${size} tools`);
  return [...captured, ...generated].slice(0, size);
}

/**
 * The same catalog as the MCP servers that would serve it: the captured servers' tools under their server's name,
 * each generated service's under its prefix (`crm_create_contact` is tool `create_contact` of server `crm`).
 * Servers keep the catalog's order of first appearance.
 */
export function catalogServers(size = 200) {
  const captured = new Map(
    SERVERS.map((server) => [server, new Set(capturedToolsOf(server).map((tool) => tool.name))]),
  );
  const prefixes = SERVICES.map((service) => service.prefix);
  const servers = new Map();
  for (const tool of buildCatalog(size)) {
    let server = SERVERS.find((name) => captured.get(name).has(tool.name));
    let name = tool.name;
    if (server === undefined) {
      server = prefixes.find((prefix) => tool.name.startsWith(`${prefix}_`));
      name = tool.name.slice(server.length + 1);
    }
    if (!servers.has(server)) servers.set(server, []);
    servers.get(server).push({ ...tool, name });
  }
  return [...servers].map(([server, tools]) => ({ server, tools }));
}
