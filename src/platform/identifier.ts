/**
 * The identifier a script uses for a tool: characters that are not valid in a JavaScript identifier
 * become `_`. `mcp__docs__search` stays as it is, `my-tool` becomes `my_tool`.
 */
export function toCodemodeIdentifier(name: string): string {
  if (isIdentifier(name)) return name;
  let identifier = "";
  for (const char of name) {
    const valid = identifier === "" ? /^[A-Za-z_$]$/.test(char) : /^[A-Za-z0-9_$]$/.test(char);
    identifier += valid ? char : "_";
  }
  return identifier === "" ? "_" : identifier;
}

/** True when `name` can be written as a bare JavaScript identifier (`tools.name`, a global). */
export function isIdentifier(name: string): boolean {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(name);
}
