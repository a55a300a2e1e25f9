/**
 * Splits text into trimmed lines; every JavaScript line terminator counts. (`trimEnd`, not `/\s+$/`: that pattern
 * tries every start of a run of spaces, so 100,000 spaces before a letter took seconds.)
 */
export function textLines(text: string): string[] {
  const lines = text.split(/\r\n|[\r\n\u2028\u2029]/).map((line) => line.trimEnd());
  while (lines.length > 0 && lines[0]?.trim() === "") lines.shift();
  while (lines.length > 0 && lines[lines.length - 1]?.trim() === "") lines.pop();
  return lines;
}

/** One line of text, whitespace runs collapsed. */
export function oneLine(text: string): string {
  return text.replace(/\s+/g, " ").trim();
}

/** A `/** … *\/` comment at `indent`; `*\/` inside the text is escaped so it cannot end the comment early. */
export function jsDoc(lines: string[], indent: string): string {
  const safe = lines.map((line) => line.replace(/\*\//g, "*\\/"));
  if (safe.length === 0) return "";
  if (safe.length === 1) return `${indent}/** ${safe[0]} */\n`;
  return `${indent}/**\n${safe.map((line) => (line === "" ? `${indent} *` : `${indent} * ${line}`)).join("\n")}\n${indent} */\n`;
}

/** `//` comment lines at `indent`, one per line of text. */
export function lineComments(lines: string[], indent: string): string {
  return lines.map((line) => (line === "" ? `${indent}//\n` : `${indent}// ${line}\n`)).join("");
}

/** The first sentence (or line) of a description, shortened to `maxChars`. */
export function summarize(description: string | undefined, maxChars: number): string {
  if (description === undefined) return "";
  const first = textLines(description).find((line) => line.trim() !== "") ?? "";
  const text = oneLine(first);
  const sentence = /^(.+?[.!?])(\s|$)/.exec(text)?.[1] ?? text;
  if (sentence.length <= maxChars) return sentence;
  const cut = sentence.slice(0, Math.max(1, maxChars - 1));
  // Cut at the last whole word, unless that throws away more than half.
  const space = /\s/.test(sentence.charAt(cut.length)) ? cut.length : cut.lastIndexOf(" ");
  return `${space > maxChars / 2 ? cut.slice(0, space).trimEnd() : cut}…`;
}
