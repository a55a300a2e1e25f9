/** The fetch wrapper that ends an HTTP server's answer stream with errors for the requests it did not answer. */
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { describe, expect, it } from "vitest";
import { answerCutReason, unansweredReason, watchAnswerStreams } from "../dist/upstream/answer-streams.js";

const MARKER = "test-marker";
const post = (body: unknown): RequestInit => ({ method: "POST", body: JSON.stringify(body) });
const request = (id: number | string) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "t" } });

/** A response whose event stream yields `chunks`, then ends, or breaks when `breakWith` is given. */
function streamed(chunks: string[], breakWith?: Error, type = "text/event-stream"): Response {
  const encoder = new TextEncoder();
  let index = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      const chunk = chunks[index++];
      if (chunk !== undefined) controller.enqueue(encoder.encode(chunk));
      else if (breakWith) controller.error(breakWith);
      else controller.close();
    },
  });
  return new Response(body, { headers: { "content-type": type } });
}

async function read(response: Response): Promise<{ text: string; error?: unknown }> {
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let text = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return { text };
      text += decoder.decode(value, { stream: true });
    }
  } catch (error) {
    return { text, error };
  }
}

/** The JSON-RPC messages in an event stream's data lines. */
const messages = (text: string) =>
  text
    .split("\n")
    .filter((line) => line.startsWith("data: "))
    .map((line) => JSON.parse(line.slice(6)) as { id: unknown; error?: { code: number; message: string } });

describe("watchAnswerStreams", () => {
  it("ends a stream that broke before its answer with an error for that request, marked for the upstream", async () => {
    const fetch = watchAnswerStreams(MARKER, async () => streamed([": hello\n\n"], new TypeError("terminated")));
    const { text, error } = await read(await fetch("http://x/mcp", post(request(7))));
    expect(error).toBeUndefined();
    const [answer] = messages(text);
    expect(answer).toMatchObject({ id: 7, error: { code: -32000 } });
    const asSdk = new McpError(answer?.error?.code as number, answer?.error?.message as string, {
      unanswered: MARKER,
      reason: answer?.error?.message,
    });
    expect(unansweredReason(asSdk, MARKER)).toBe("the server's answer stream broke before it answered: terminated");
    // A server cannot forge it without the marker.
    expect(unansweredReason(new McpError(-32000, "x", { unanswered: "guess", reason: "x" }), MARKER)).toBeUndefined();
  });

  it("leaves a stream alone once it carried the answer, even split across chunks", async () => {
    const answer = `event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id: "a", result: { content: [] } })}\n\n`;
    const chunks = [answer.slice(0, 17), answer.slice(17, 40), answer.slice(40)];
    const fetch = watchAnswerStreams(MARKER, async () => streamed(chunks));
    const { text } = await read(await fetch("http://x/mcp", post(request("a"))));
    expect(text).toBe(answer);
  });

  it("answers only the requests of a batch that the stream did not answer, when it ends", async () => {
    const one = `data: ${JSON.stringify({ jsonrpc: "2.0", id: 1, error: { code: 1, message: "no" } })}\n\n`;
    const fetch = watchAnswerStreams(MARKER, async () => streamed([one]));
    const { text } = await read(await fetch("http://x/mcp", post([request(1), request(2)])));
    expect(messages(text).map((m) => [m.id, m.error?.message])).toEqual([
      [1, "no"],
      [2, "the server ended its answer stream without answering"],
    ]);
  });

  it("leaves a resumable stream (its events have ids) to the SDK's reconnection", async () => {
    const broken = new TypeError("terminated");
    const fetch = watchAnswerStreams(MARKER, async () => streamed(["id: 5\ndata: \n\n"], broken));
    const { error } = await read(await fetch("http://x/mcp", post(request(1))));
    expect(error).toBe(broken);
  });

  it("passes on what is not a POST's event stream as it came", async () => {
    const json = new Response('{"jsonrpc":"2.0","id":1,"result":{}}', {
      headers: { "content-type": "application/json" },
    });
    const passed = await watchAnswerStreams(MARKER, async () => json)("http://x/mcp", post(request(1)));
    expect(await passed.text()).toBe('{"jsonrpc":"2.0","id":1,"result":{}}');
    const get = await watchAnswerStreams(MARKER, async () => streamed([": keep\n\n", "data: {}\n\n"]))("http://x/mcp", {
      method: "GET",
    });
    expect((await read(get)).text).toBe(": keep\n\ndata: {}\n\n");
    const sent = post({ jsonrpc: "2.0", method: "notifications/initialized" });
    const notification = await watchAnswerStreams(MARKER, async () => streamed([]))("http://x/mcp", sent);
    expect((await read(notification)).text).toBe("");
  });

  const LIMITS = { messageBytes: 1000, inFlightBytes: 4000 };

  it("cuts an event past the message cap, ending it as an event the SDK skips, and answers its request with a marked error", async () => {
    // One endless data line, in chunks of 300 bytes, and a request answered by none of it.
    const line = `data: ${"x".repeat(294)}`;
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        sent++;
        controller.enqueue(new TextEncoder().encode(line));
      },
    });
    const fetch = watchAnswerStreams(
      MARKER,
      async () => new Response(body, { headers: { "content-type": "text/event-stream" } }),
      LIMITS,
    );
    const { text, error } = await read(await fetch("http://x/mcp", post(request(3))));
    expect(error).toBeUndefined();
    // The first three chunks (900 bytes) were passed on; the fourth would have made the event 1,200 bytes.
    expect(text.startsWith(line.repeat(3))).toBe(true);
    const rest = text.slice(line.length * 3);
    expect(rest.startsWith("\nevent: airlock-cut\n\n")).toBe(true);
    const [answer] = messages(rest);
    expect(answer).toMatchObject({ id: 3, error: { code: -32000 } });
    const reason = "the server sent a message longer than 1000 bytes (MAX_UPSTREAM_MESSAGE_BYTES)";
    expect(answer?.error?.message).toBe(reason);
    const asSdk = new McpError(-32000, reason, { unanswered: MARKER, reason, cut: true });
    expect(answerCutReason(asSdk, MARKER)).toBe(reason);
    expect(unansweredReason(asSdk, MARKER)).toBeUndefined();
    // Nothing more was read from the server.
    expect(sent).toBeLessThanOrEqual(5);
  });

  it("counts an event from its blank line on, whatever its line ends: many small events pass", async () => {
    const event = (n: number) =>
      `data: ${JSON.stringify({ jsonrpc: "2.0", method: "notifications/message", params: { n } })}`;
    const chunks = Array.from({ length: 200 }, (_, n) => `${event(n)}${["\n\n", "\r\n\r\n", "\r\r"][n % 3]}`);
    const fetch = watchAnswerStreams(MARKER, async () => streamed(chunks), LIMITS);
    const { text, error } = await read(await fetch("http://x/mcp", { method: "GET" }));
    expect(error).toBeUndefined();
    expect(text).toBe(chunks.join(""));
    // A CR and an LF in two chunks are one line end, not a blank line: the event goes on and is cut.
    const split = [`data: ${"y".repeat(600)}\r`, `\ndata: ${"y".repeat(600)}\r\n\r\n`];
    const cut = await read(
      await watchAnswerStreams(MARKER, async () => streamed(split), LIMITS)("http://x/mcp", { method: "GET" }),
    );
    expect(cut.text).toBe(`${split[0]}event: airlock-cut\n\n`);
  });

  it("cuts a JSON body past the cap, by its declared length before reading it, or as it comes", async () => {
    const reason = "the server sent a message longer than 1000 bytes (MAX_UPSTREAM_MESSAGE_BYTES)";
    let pulled = 0;
    const declared = new Response(
      new ReadableStream({
        pull(controller) {
          pulled++;
          controller.enqueue(new TextEncoder().encode("x".repeat(100)));
        },
      }),
      { headers: { "content-type": "application/json", "content-length": "5000" } },
    );
    const early = await watchAnswerStreams(MARKER, async () => declared, LIMITS)("http://x/mcp", post(request(1)));
    const refused = await early.json().catch((error: unknown) => error);
    expect(answerCutReason(refused, MARKER)).toBe(reason);
    expect(pulled).toBeLessThanOrEqual(1);
    const endless = streamed(
      Array.from({ length: 50 }, () => "y".repeat(100)),
      undefined,
      "application/json",
    );
    const late = await watchAnswerStreams(MARKER, async () => endless, LIMITS)("http://x/mcp", post(request(2)));
    expect(answerCutReason(await late.json().catch((error: unknown) => error), MARKER)).toBe(reason);
  });

  it("cuts the response whose bytes pass the connection's cap for messages under way, and lets go of a stream's share as it ends", async () => {
    // Three streams, each 800 bytes into an event that has not ended: the third passes 2,000 bytes together.
    const pending = () => {
      let sent = false;
      return new Response(
        new ReadableStream<Uint8Array>({
          pull(controller) {
            if (!sent) controller.enqueue(new TextEncoder().encode(`data: ${"z".repeat(794)}`));
            sent = true;
            return new Promise(() => {});
          },
        }),
        { headers: { "content-type": "text/event-stream" } },
      );
    };
    const fetch = watchAnswerStreams(MARKER, async () => pending(), { messageBytes: 1000, inFlightBytes: 2000 });
    const first = (await fetch("http://x/mcp", post(request(1)))).body?.getReader() as ReadableStreamDefaultReader;
    const second = (await fetch("http://x/mcp", post(request(2)))).body?.getReader() as ReadableStreamDefaultReader;
    await first.read();
    await second.read();
    const third = await read(await fetch("http://x/mcp", post(request(3))));
    expect(messages(third.text)[0]?.error?.message).toBe(
      "the server's answers under way took more than 2000 bytes together (MAX_UPSTREAM_ANSWER_BYTES_IN_FLIGHT)",
    );
    // Once the first stream is done with, its share is free again.
    await first.cancel();
    const fourth = (await fetch("http://x/mcp", post(request(4)))).body?.getReader() as ReadableStreamDefaultReader;
    const { value } = await fourth.read();
    expect(new TextDecoder().decode(value)).toBe(`data: ${"z".repeat(794)}`);
    await second.cancel();
    await fourth.cancel();
  });

  it("lets a closed transport's abort through as it is", async () => {
    const controller = new AbortController();
    const aborted = new DOMException("aborted", "AbortError");
    const fetch = watchAnswerStreams(MARKER, async () => streamed([], aborted));
    controller.abort();
    const { error } = await read(await fetch("http://x/mcp", { ...post(request(1)), signal: controller.signal }));
    expect(error).toBe(aborted);
  });
});
