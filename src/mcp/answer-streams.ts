/**
 * Watches the event streams that carry an HTTP server's answers. A POST's `text/event-stream` response that ends, or
 * breaks, before it answered the requests of that POST leaves them pending until their deadline: the SDK resumes a
 * stream only when the server gave its events ids, and otherwise waits. This fetch wrapper ends such a stream with a
 * JSON-RPC error for each unanswered request instead, marked so that the upstream tells it from a server's own error
 * (see `unansweredReason`). Streams the SDK can resume are left to it.
 */
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { createParser } from "eventsource-parser";

type Fetch = (url: string | URL, init?: RequestInit) => Promise<Response>;
type RequestId = string | number;

/** The error code of the answers this module writes (the SDK's own "connection closed" code). */
const UNANSWERED_CODE = -32000;

/** A fetch that ends a POST's answer stream with errors for the requests it did not answer. */
export function watchAnswerStreams(marker: string, base: Fetch = fetch): Fetch {
  return async (url, init) => {
    const response = await base(url, init);
    const ids = init?.method === "POST" ? requestIds(init.body) : [];
    if (ids.length === 0 || !response.ok || response.body === null) return response;
    const type = response.headers.get("content-type") ?? "";
    if (!/^text\/event-stream\b/i.test(type.trim())) return response;
    return new Response(watch(response.body, ids, marker, init?.signal ?? undefined), {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  };
}

/** If `error` is one of the answers `watchAnswerStreams(marker)` wrote, why the stream did not carry the real one. */
export function unansweredReason(error: unknown, marker: string): string | undefined {
  if (!(error instanceof McpError) || error.code !== UNANSWERED_CODE) return undefined;
  const data = error.data as { unanswered?: unknown; reason?: unknown } | undefined;
  return data?.unanswered === marker && typeof data.reason === "string" ? data.reason : undefined;
}

/** The ids of the requests a POST carries. */
function requestIds(body: BodyInit | null | undefined): RequestId[] {
  if (typeof body !== "string") return [];
  return idsOf(body, (m) => typeof m.method === "string");
}

/** The ids of the JSON-RPC messages in `json` (one or a batch) that `pick` keeps. */
function idsOf(json: string, pick: (message: Record<string, unknown>) => boolean): RequestId[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch {
    return [];
  }
  const ids: RequestId[] = [];
  for (const message of Array.isArray(parsed) ? parsed : [parsed]) {
    if (message === null || typeof message !== "object" || !pick(message)) continue;
    const id = (message as { id?: unknown }).id;
    if (typeof id === "string" || typeof id === "number") ids.push(id);
  }
  return ids;
}

function watch(
  body: ReadableStream<Uint8Array>,
  ids: RequestId[],
  marker: string,
  signal: AbortSignal | undefined,
): ReadableStream<Uint8Array> {
  const open = new Set<RequestId>(ids);
  // An event with an id makes the stream resumable: the SDK reconnects with it, and the answer may still come.
  let resumable = false;
  const parser = createParser({
    onEvent(event) {
      if (event.id) resumable = true;
      if (event.event !== undefined && event.event !== "message") return;
      // The responses (results or errors) in the event.
      for (const id of idsOf(event.data, (m) => "result" in m || "error" in m)) open.delete(id);
    },
  });
  const decoder = new TextDecoder();
  const reader = body.getReader();
  const unanswered = (reason: string) =>
    new TextEncoder().encode(
      [...open]
        .map((id) => {
          const error = { code: UNANSWERED_CODE, message: reason, data: { unanswered: marker, reason } };
          return `event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id, error })}\n\n`;
        })
        .join(""),
    );
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (error) {
        // Closing the transport aborts its requests: nothing waits for them any more.
        if (signal?.aborted || resumable || open.size === 0) throw error;
        controller.enqueue(unanswered(`the server's answer stream broke before it answered: ${describe(error)}`));
        controller.close();
        return;
      }
      if (chunk.done) {
        parser.feed(decoder.decode());
        if (!resumable && open.size > 0) {
          controller.enqueue(unanswered("the server ended its answer stream without answering"));
        }
        controller.close();
        return;
      }
      parser.feed(decoder.decode(chunk.value, { stream: true }));
      controller.enqueue(chunk.value);
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as { cause?: unknown }).cause;
  return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
}
