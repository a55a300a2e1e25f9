/**
 * Output token counts: the same tokens as js-tiktoken's `encode` (o200k_base) on ordinary text, in time linear in
 * the text on any text. js-tiktoken's byte-pair merge is quadratic in one pre-token: a program whose output was
 * 200,000 letters froze the gateway's thread for about 30 minutes, and the AI SDK tool's host thread alike.
 */
import { readFileSync } from "node:fs";
import { InlineCodemodeSandbox } from "airlock-codemode";
import { createCodeTool } from "airlock-codemode/ai";
import { Tiktoken } from "js-tiktoken/lite";
import o200k from "js-tiktoken/ranks/o200k_base";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTokens, cutToTokens } from "../dist/gateway/tokens.js";
import { paged, REPO_ROOT } from "./fixtures/mcp/servers.ts";
import { gatewayWithClients } from "./helpers/gateway-clients.ts";

/** A text of `length` characters drawn at random (seeded) from `alphabet`. */
function randomText(length: number, alphabet: string, seed: number): string {
  const chars = [...alphabet];
  let state = seed;
  let out = "";
  for (let i = 0; i < length; i++) {
    state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
    out += chars[Math.floor(state / 65_536) % chars.length];
  }
  return out;
}

/** Random letters with no space: one pre-token, the case js-tiktoken takes quadratic time on. */
const LETTERS = "abcdefghijklmnopqrstuvwxyz";

describe("token counts", () => {
  it("are js-tiktoken's on ordinary and mixed text", async () => {
    const reference = new Tiktoken(o200k);
    const texts = [
      readFileSync(`${REPO_ROOT}/README.md`, "utf8"),
      readFileSync(`${REPO_ROOT}/src/gateway/gateway.ts`, "utf8"),
      JSON.stringify({ rows: Array.from({ length: 300 }, (_, i) => ({ id: i, name: `row ${i}`, ok: i % 3 === 0 })) }),
      // Short words of many scripts, spaces, newlines, digits, contractions, special-token text: 40,000 characters
      // each, so that the counting crosses its windows of text many times.
      ...[
        "abc ",
        "aAbB1 .\n",
        "漢字かなカナ한 ",
        "é€😀\u0301 a",
        " \t\r\n a",
        "a'sT.-/\n ",
        "0123456789 ",
        "<|endoftext|> x",
      ].map((alphabet, i) => randomText(40_000, alphabet, i + 1)),
    ];
    for (const text of texts) expect(await countTokens(text)).toBe(reference.encode(text, [], []).length);
  });

  it("keep the same start of a text as js-tiktoken's first tokens", async () => {
    const reference = new Tiktoken(o200k);
    // Longer than the largest budget: the README and the pages it links to.
    const pages = ["README.md", "docs/sandbox.md", "docs/gateway.md"];
    const text = pages.map((page) => readFileSync(`${REPO_ROOT}/${page}`, "utf8")).join("\n");
    for (const budget of [1, 7, 100, 1000, 5000]) {
      const { texts, cut } = await cutToTokens([text], budget);
      expect(cut).toBe(true);
      const decoded = reference.decode(reference.encode(text, [], []).slice(0, budget));
      // A cut inside a character drops the character, which decode gives as U+FFFD.
      expect(texts[0]).toBe(decoded.replace(/\uFFFD+$/, ""));
    }
  });

  it("grow linearly with one long run of letters, marks or spaces", async () => {
    // Each was quadratic (200,000 letters: about 30 minutes) or overflowed the pattern's backtracking stack.
    const texts = [
      randomText(200_000, LETTERS, 7),
      "A".repeat(1_000_000),
      `${" ".repeat(1_000_000)}a`,
      "\u0301".repeat(1_000_000),
      "漢".repeat(500_000),
    ];
    for (const text of texts) {
      const started = Date.now();
      const tokens = await countTokens(text);
      expect(tokens).toBeGreaterThan(text.length / 200);
      expect(tokens).toBeLessThanOrEqual(Buffer.byteLength(text));
      expect(Date.now() - started).toBeLessThan(30_000);
    }
    // A run longer than one window counts near what the whole run would: one token more at most per 16 Ki characters.
    expect(await countTokens("a".repeat(40_000))).toBeGreaterThanOrEqual(5_000);
    expect(await countTokens("a".repeat(40_000))).toBeLessThanOrEqual(5_003);
  });
});

describe("the MCP gateway", () => {
  let gateway: Awaited<ReturnType<typeof gatewayWithClients>>;

  beforeAll(async () => {
    gateway = await gatewayWithClients({ mcpServers: { steady: paged("--tools", "2") } }, { poolSize: 2 });
  });

  afterAll(() => gateway?.close());

  it("cuts a program's 200,000 letters to its token budget, and answers another client meanwhile", async () => {
    const hostile = await gateway.connect("letters");
    const other = await gateway.connect("other");
    const started = Date.now();
    const letters = hostile.execute(`return ${JSON.stringify(randomText(200_000, LETTERS, 3))};`);
    expect((await other.execute("return 40 + 2")).structuredContent).toMatchObject({ ok: true, value: 42 });
    const answer = await letters;
    expect(Date.now() - started).toBeLessThan(30_000);
    const blocks = answer.content as { type: string; text: string }[];
    expect(blocks.at(-1)?.text).toMatch(
      /^\[Output cut: the text above is the first 20000 tokens \(o200k_base\) of 200000 characters\./,
    );
    expect(await countTokens(blocks[0]?.text ?? "")).toBeLessThanOrEqual(20_000);
    // structuredContent carries the same cut text.
    expect(answer.structuredContent).toMatchObject({ ok: true, truncated: true, output: "" });
    expect(answer.structuredContent).not.toHaveProperty("value");
  });

  it("gives structuredContent the text the content kept", async () => {
    const { execute } = await gateway.connect("printer");
    const answer = await execute(
      '// @options: {"max_output_tokens": 30}\nfor (let i = 0; i < 50; i++) console.log("line " + i);\nreturn 7;',
    );
    const kept = (answer.content as { type: string; text: string }[])[0]?.text ?? "";
    expect(kept.startsWith("line 0\nline 1\n")).toBe(true);
    expect(answer.structuredContent).toMatchObject({ ok: true, truncated: true, output: kept });
    expect(answer.structuredContent).not.toHaveProperty("value");
    const whole = await execute(
      'console.log("a"); image({ type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" }); console.log("b"); return 7;',
    );
    expect(whole.structuredContent).toMatchObject({ ok: true, truncated: false, output: "a\nb", value: 7, images: 1 });
  });
});

describe("the AI SDK code tool", () => {
  it("cuts 300,000 letters to the 20,000 tokens a program asked for", async () => {
    const sandbox = new InlineCodemodeSandbox();
    const code = createCodeTool({ tools: {}, sandbox });
    try {
      const started = Date.now();
      const output = (await code.execute?.(
        {
          code: `// @options: {"max_output_tokens": 20000}\ntext(${JSON.stringify(randomText(300_000, LETTERS, 5))});`,
        },
        { toolCallId: "letters", messages: [] },
      )) as { ok: boolean; output: { type: string; text: string }[] };
      expect(Date.now() - started).toBeLessThan(30_000);
      expect(output.ok).toBe(true);
      expect(output.output.at(-1)?.text).toMatch(/^\[Output cut: the text above is the first 20000 tokens/);
      expect(await countTokens(output.output[0]?.text ?? "")).toBeLessThanOrEqual(20_000);
    } finally {
      await sandbox.close();
    }
  });
});
