/** The fetch wrapper that ends an HTTP server's answer stream with errors for the requests it did not answer. */
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { describe, expect, it } from "vitest";
import { unansweredReason, watchAnswerStreams } from "../dist/mcp/answer-streams.js";

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

  it("passes through what is not a POST's event stream", async () => {
    const json = new Response("{}", { headers: { "content-type": "application/json" } });
    expect(await watchAnswerStreams(MARKER, async () => json)("http://x/mcp", post(request(1)))).toBe(json);
    const get = streamed([]);
    expect(await watchAnswerStreams(MARKER, async () => get)("http://x/mcp", { method: "GET" })).toBe(get);
    const notification = streamed([]);
    const sent = post({ jsonrpc: "2.0", method: "notifications/initialized" });
    expect(await watchAnswerStreams(MARKER, async () => notification)("http://x/mcp", sent)).toBe(notification);
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
