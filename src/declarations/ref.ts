/** Decodes one JSON-pointer segment: `~1` is `/`, `~0` is `~`. */
function decodeSegment(segment: string): string {
  return segment.replace(/~1/g, "/").replace(/~0/g, "~");
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

/** Finds the subschema that declares `"$anchor": name` (or a draft-07 `"$id": "#name"`). */
function findAnchor(node: unknown, name: string, seen: Set<object>): unknown {
  if (!isObject(node) || seen.has(node)) return undefined;
  seen.add(node);
  if (!Array.isArray(node) && (node.$anchor === name || node.$id === `#${name}`)) return node;
  for (const value of Object.values(node)) {
    const found = findAnchor(value, name, seen);
    if (found !== undefined) return found;
  }
  return undefined;
}

/**
 * Resolves a local `$ref` (`#`, `#/$defs/Name`, `#/definitions/Name`, any JSON pointer with `~0`/`~1` and percent
 * escapes, or a plain-name anchor `#name`) against the root schema. Returns `undefined` for remote references
 * and for pointers that lead nowhere.
 */
export function resolveSchemaRef(root: unknown, ref: string): unknown {
  if (!ref.startsWith("#")) return undefined;
  let fragment: string;
  try {
    fragment = decodeURIComponent(ref.slice(1));
  } catch {
    return undefined;
  }
  if (fragment === "") return root;
  if (!fragment.startsWith("/")) return findAnchor(root, fragment, new Set());
  let node: unknown = root;
  for (const raw of fragment.slice(1).split("/")) {
    const segment = decodeSegment(raw);
    if (Array.isArray(node)) {
      if (!/^(0|[1-9][0-9]*)$/.test(segment)) return undefined;
      node = node[Number(segment)];
    } else if (isObject(node) && Object.hasOwn(node, segment)) {
      node = node[segment];
    } else {
      return undefined;
    }
  }
  return node;
}
