import { toCodemodeIdentifier } from "../platform/identifier.ts";
import { summarize } from "./comments.ts";
import type { JsonSchemaObject, SearchToolsOptions, ToolLike, ToolSearchResult } from "./declaration-types.ts";
import { resolveSchemaRef } from "./ref.ts";
import { renderToolSignature } from "./render.ts";
import { SUMMARY_MAX_CHARS } from "./render-limits.ts";
import { toJsonSchema } from "./zod.ts";

/** Words too common in tool descriptions to tell tools apart. */
const STOPWORDS = new Set(
  (
    "a an and are as at be by can do does for from has have how i if in into is it its me my of on or so that the " +
    "their them then there these this to use used uses using was what when where which while will with you your"
  ).split(" "),
);

/** Weights of the fields of a tool: a word in the name counts most. */
const FIELD_WEIGHTS = { name: 3, parameters: 1.5, description: 1, parameterText: 0.5 } as const;
type Field = keyof typeof FIELD_WEIGHTS;
const FIELDS = Object.keys(FIELD_WEIGHTS) as Field[];

/** BM25 saturation and length normalisation. */
const K1 = 1.2;
const B = 0.75;
/** Added when the query is the tool's name or identifier, separators and case aside. */
const EXACT_NAME_BONUS = 10;

/** Reduces a word to a stem, so `files`/`file` and `listing`/`list` meet; the same rule applies to both sides. */
function stem(word: string): string {
  let w = word;
  if (w.length > 4 && w.endsWith("ies")) w = `${w.slice(0, -3)}y`;
  else if (w.length > 4 && /(ss|x|ch|sh)es$/.test(w)) w = w.slice(0, -2);
  else if (w.length > 3 && w.endsWith("s") && !w.endsWith("ss") && !w.endsWith("us")) w = w.slice(0, -1);
  if (w.length > 5 && w.endsWith("ing")) w = w.slice(0, -3);
  else if (w.length > 4 && w.endsWith("ed")) w = w.slice(0, -2);
  if (w.length > 4 && w.endsWith("e")) w = w.slice(0, -1);
  return w;
}

/** Splits text into stemmed lowercase words: `snake_case`, `camelCase`, `kebab-case`, `HTTPServer` and prose. */
export function tokenize(text: string): string[] {
  // `HTTPServer` splits before the capital that starts a word; `([A-Z]+)([A-Z][a-z])` did the same, but tried every
  // start of a run of capitals to its end, so 100,000 capitals took seconds.
  const spaced = text
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .replace(/([A-Z])(?=[A-Z][a-z])/g, "$1 ")
    .toLowerCase();
  const words = spaced.split(/[^\p{L}\p{N}]+/u).filter((word) => word !== "" && !STOPWORDS.has(word));
  return words.map(stem);
}

function normalizeName(name: string): string {
  return name.toLowerCase().replace(/[^\p{L}\p{N}]+/gu, "");
}

function isObject(value: unknown): value is JsonSchemaObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Parameter names and their descriptions: the top-level properties of the input schema, and one level below. */
function parameterWords(schema: unknown): { names: string[]; text: string[] } {
  const root = toJsonSchema(schema, "input");
  const names: string[] = [];
  const text: string[] = [];
  const visit = (node: unknown, depth: number) => {
    const resolved = isObject(node) && typeof node.$ref === "string" ? resolveSchemaRef(root, node.$ref) : node;
    if (!isObject(resolved)) return;
    for (const variant of [resolved.allOf, resolved.anyOf, resolved.oneOf]) {
      if (Array.isArray(variant)) for (const item of variant) visit(item, depth);
    }
    if (!isObject(resolved.properties)) return;
    for (const [name, property] of Object.entries(resolved.properties)) {
      names.push(name);
      if (isObject(property) && typeof property.description === "string") text.push(property.description);
      if (depth < 1) visit(isObject(property) && isObject(property.items) ? property.items : property, depth + 1);
    }
  };
  visit(root, 0);
  return { names, text };
}

interface Document {
  tool: ToolLike;
  /** The tool's fields the document was read from. */
  name: string;
  description: string | undefined;
  inputSchema: unknown;
  terms: Record<Field, Map<string, number>>;
  lengths: Record<Field, number>;
}

function countTerms(words: string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const word of words) counts.set(word, (counts.get(word) ?? 0) + 1);
  return counts;
}

/**
 * Documents by tool, so that each search of a catalog does not read every tool's words again (10,000 tools took most
 * of a second per query). A document is used again only while its tool's name, description and input schema are
 * the same values.
 */
const documentCache = new WeakMap<ToolLike, Document>();

function toDocument(tool: ToolLike): Document {
  const known = documentCache.get(tool);
  if (
    known !== undefined &&
    known.name === tool.name &&
    known.description === tool.description &&
    known.inputSchema === tool.inputSchema
  ) {
    return known;
  }
  const document = readDocument(tool);
  documentCache.set(tool, document);
  return document;
}

function readDocument(tool: ToolLike): Document {
  const parameters = parameterWords(tool.inputSchema);
  const words: Record<Field, string[]> = {
    name: tokenize(tool.name),
    parameters: parameters.names.flatMap(tokenize),
    description: tokenize(tool.description ?? ""),
    parameterText: parameters.text.flatMap(tokenize),
  };
  return {
    tool,
    name: tool.name,
    description: tool.description,
    inputSchema: tool.inputSchema,
    terms: {
      name: countTerms(words.name),
      parameters: countTerms(words.parameters),
      description: countTerms(words.description),
      parameterText: countTerms(words.parameterText),
    },
    lengths: {
      name: words.name.length,
      parameters: words.parameters.length,
      description: words.description.length,
      parameterText: words.parameterText.length,
    },
  };
}

/**
 * Ranks a catalog's tools against a query with BM25 over weighted fields: words of the name (split at `_`, `-`,
 * `.` and camelCase humps), parameter names, the description and parameter descriptions. Tools that match no
 * query word are left out; ties keep catalog order.
 */
export function searchTools(
  catalog: readonly ToolLike[],
  query: string,
  options: SearchToolsOptions = {},
): ToolSearchResult[] {
  const limit = options.limit ?? 10;
  const queryTerms = [...new Set(tokenize(query))];
  if (queryTerms.length === 0 || limit <= 0) return [];
  const seen = new Set<string>();
  const documents = catalog.filter((tool) => !seen.has(tool.name) && seen.add(tool.name)).map(toDocument);
  const count = documents.length;
  const averages = {} as Record<Field, number>;
  for (const field of FIELDS) {
    averages[field] = Math.max(1, documents.reduce((sum, doc) => sum + doc.lengths[field], 0) / Math.max(1, count));
  }
  const idf = new Map<string, number>();
  for (const term of queryTerms) {
    const withTerm = documents.filter((doc) => FIELDS.some((field) => doc.terms[field].has(term))).length;
    idf.set(term, Math.log(1 + (count - withTerm + 0.5) / (withTerm + 0.5)));
  }
  const normalizedQuery = normalizeName(query);
  const scored = documents.map((doc, position) => {
    let score = 0;
    for (const term of queryTerms) {
      let weighted = 0;
      for (const field of FIELDS) {
        const tf = doc.terms[field].get(term) ?? 0;
        if (tf === 0) continue;
        weighted += (FIELD_WEIGHTS[field] * tf) / (1 - B + (B * doc.lengths[field]) / averages[field]);
      }
      if (weighted > 0) score += ((idf.get(term) ?? 0) * (weighted * (K1 + 1))) / (weighted + K1);
    }
    if (score > 0 && normalizedQuery !== "" && normalizeName(doc.tool.name) === normalizedQuery) {
      score += EXACT_NAME_BONUS;
    }
    return { doc, position, score };
  });
  return scored
    .filter((entry) => entry.score > 0)
    .sort((a, b) => b.score - a.score || a.position - b.position)
    .slice(0, limit)
    .map(({ doc, score }) => ({
      name: doc.tool.name,
      identifier: toCodemodeIdentifier(doc.tool.name),
      summary: summarize(doc.tool.description, SUMMARY_MAX_CHARS),
      signature: renderToolSignature(doc.tool),
      score: Math.round(score * 1000) / 1000,
    }));
}
