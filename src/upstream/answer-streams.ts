/**
 * Watches the bodies of an HTTP server's responses, which carry its answers. Two things are done to them:
 *
 * - Each is capped, as the SDK caps a stdio server's messages: one message (an event of an event stream, or a whole
 *   body otherwise) past `MAX_UPSTREAM_MESSAGE_BYTES`, or the messages under way on one connection together past
 *   `MAX_UPSTREAM_ANSWER_BYTES_IN_FLIGHT`, is cut off there. Without it, a server that streamed one endless answer grew
 *   the gateway by twice what it sent until the call's deadline. The requests a cut stream carried get an error
 *   instead, marked (see `answerCutReason`), and the connection stays, for the other calls on it.
 * - A POST's `text/event-stream` response that ends, or breaks, before it answered the requests of that POST leaves
 *   them pending until their deadline: the SDK resumes a stream only when the server gave its events ids, and
 *   otherwise waits. Such a stream is ended with a JSON-RPC error for each unanswered request instead, marked so that
 *   the upstream tells it from a server's own error (see `unansweredReason`). Streams the SDK can resume are left to
 *   it.
 */
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { createParser } from "eventsource-parser";
import { MAX_UPSTREAM_ANSWER_BYTES_IN_FLIGHT, MAX_UPSTREAM_MESSAGE_BYTES } from "./upstream-limits.ts";

type Fetch = (url: string | URL, init?: RequestInit) => Promise<Response>;
type RequestId = string | number;

/** The error code of the answers this module writes (the SDK's own "connection closed" code). */
const UNANSWERED_CODE = -32000;
/**
 * Ends the event a cut stream was in the middle of, as an event of a type the SDK skips: its data, cut short, would
 * otherwise reach the SDK's parser as a message that is not JSON.
 */
const CUT_EVENT = "event: airlock-cut\n\n";
const LF = 10;
const CR = 13;

/** The caps one connection's responses are held to: one message, and all those under way together. */
export interface AnswerLimits {
  messageBytes: number;
  inFlightBytes: number;
}

const DEFAULT_LIMITS: AnswerLimits = {
  messageBytes: MAX_UPSTREAM_MESSAGE_BYTES,
  inFlightBytes: MAX_UPSTREAM_ANSWER_BYTES_IN_FLIGHT,
};

/** A fetch for one connection: its response bodies capped, and a POST's answer stream ended with errors if need be. */
export function watchAnswerStreams(marker: string, base: Fetch = fetch, limits: AnswerLimits = DEFAULT_LIMITS): Fetch {
  // The bytes of the messages under way on this connection, all its responses together.
  const inFlight = { bytes: 0 };
  return async (url, init) => {
    const response = await base(url, init);
    if (response.body === null) return response;
    const type = response.headers.get("content-type") ?? "";
    const events = /^text\/event-stream\b/i.test(type.trim());
    const ids = init?.method === "POST" && response.ok && events ? requestIds(init.body) : [];
    const declared = Number(response.headers.get("content-length"));
    const stream = watch(response.body, {
      ids,
      events,
      marker,
      signal: init?.signal ?? undefined,
      limits,
      inFlight,
      tooLong: !events && Number.isSafeInteger(declared) && declared > limits.messageBytes,
    });
    return new Response(stream, {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  };
}

/** If `error` is one of the answers `watchAnswerStreams(marker)` wrote for a stream that ended, why it ended. */
export function unansweredReason(error: unknown, marker: string): string | undefined {
  const data = markedData(error, marker);
  return data !== undefined && data.cut !== true ? data.reason : undefined;
}

/** If `error` is one of the answers `watchAnswerStreams(marker)` wrote for a response it cut off, why it cut it. */
export function answerCutReason(error: unknown, marker: string): string | undefined {
  const data = markedData(error, marker);
  return data?.cut === true ? data.reason : undefined;
}

function markedData(error: unknown, marker: string): { reason: string; cut?: unknown } | undefined {
  if (!(error instanceof McpError) || error.code !== UNANSWERED_CODE) return undefined;
  const data = error.data as { unanswered?: unknown; reason?: unknown; cut?: unknown } | undefined;
  return data?.unanswered === marker && typeof data.reason === "string"
    ? { reason: data.reason, cut: data.cut }
    : undefined;
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

/**
 * The size of the event under way in an event stream: the bytes since the last blank line (which ends an event,
 * whatever its lines were), with CR, LF and CRLF as line ends.
 */
class EventSize {
  bytes = 0;
  /** No byte of the current line yet. */
  private lineStart = true;
  /** The last byte was a CR, so that a LF right after it ends no line. */
  private afterCr = false;

  /** Counts `chunk`; returns the largest size the event under way reached within it. */
  feed(chunk: Uint8Array): number {
    let largest = this.bytes;
    let i = 0;
    let nextLf = chunk.indexOf(LF);
    let nextCr = chunk.indexOf(CR);
    while (i < chunk.length) {
      if (nextLf !== -1 && nextLf < i) nextLf = chunk.indexOf(LF, i);
      if (nextCr !== -1 && nextCr < i) nextCr = chunk.indexOf(CR, i);
      const end = nextLf === -1 ? nextCr : nextCr === -1 ? nextLf : Math.min(nextLf, nextCr);
      if (end === -1) {
        this.bytes += chunk.length - i;
        this.lineStart = false;
        this.afterCr = false;
        largest = Math.max(largest, this.bytes);
        return largest;
      }
      if (end > i) {
        this.bytes += end - i;
        this.lineStart = false;
        this.afterCr = false;
      }
      const byte = chunk[end];
      this.bytes++;
      largest = Math.max(largest, this.bytes);
      if (byte === LF && this.afterCr) this.afterCr = false;
      else if (this.lineStart) {
        // A blank line: the event ended.
        this.bytes = 0;
        this.afterCr = byte === CR;
      } else {
        this.lineStart = true;
        this.afterCr = byte === CR;
      }
      i = end + 1;
    }
    return largest;
  }

  /** Whether the stream stands in the middle of a line. */
  get midLine(): boolean {
    return !this.lineStart;
  }
}

interface Watched {
  /** The requests a POST carried, whose answers the stream is watched for (none: not watched). */
  ids: RequestId[];
  /** An event stream (else one message: the whole body). */
  events: boolean;
  marker: string;
  signal: AbortSignal | undefined;
  limits: AnswerLimits;
  inFlight: { bytes: number };
  /** Its declared length is past the cap already. */
  tooLong: boolean;
}

function watch(body: ReadableStream<Uint8Array>, options: Watched): ReadableStream<Uint8Array> {
  const { marker, signal, limits, inFlight } = options;
  const open = new Set<RequestId>(options.ids);
  const watched = open.size > 0;
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
  const size = new EventSize();
  // This stream's share of `inFlight`: its message under way.
  let held = 0;
  const hold = (bytes: number) => {
    inFlight.bytes += bytes - held;
    held = bytes;
  };
  const reader = body.getReader();
  const encoder = new TextEncoder();
  const errors = (reason: string, cut: boolean) =>
    [...open]
      .map((id) => {
        const data = { unanswered: marker, reason, ...(cut ? { cut: true } : {}) };
        const error = { code: UNANSWERED_CODE, message: reason, data };
        return `event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id, error })}\n\n`;
      })
      .join("");
  /** Ends the stream where it stands: what it was in the middle of is dropped, and its requests get `reason`. */
  const cut = (controller: ReadableStreamDefaultController<Uint8Array>, reason: string) => {
    hold(0);
    void reader.cancel(new Error(reason)).catch(() => {});
    if (!options.events) {
      controller.error(new McpError(UNANSWERED_CODE, reason, { unanswered: marker, reason, cut: true }));
      return;
    }
    const end = (size.midLine ? "\n" : "") + (size.bytes > 0 ? CUT_EVENT : "");
    controller.enqueue(encoder.encode(end + errors(reason, true)));
    controller.close();
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (options.tooLong) {
        cut(controller, tooLongReason(limits));
        return;
      }
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (error) {
        hold(0);
        // Closing the transport aborts its requests: nothing waits for them any more.
        if (!watched || signal?.aborted || resumable || open.size === 0) throw error;
        controller.enqueue(
          encoder.encode(errors(`the server's answer stream broke before it answered: ${describe(error)}`, false)),
        );
        controller.close();
        return;
      }
      if (chunk.done) {
        hold(0);
        if (watched) parser.feed(decoder.decode());
        if (watched && !resumable && open.size > 0) {
          controller.enqueue(encoder.encode(errors("the server ended its answer stream without answering", false)));
        }
        controller.close();
        return;
      }
      const largest = options.events ? size.feed(chunk.value) : held + chunk.value.length;
      if (largest > limits.messageBytes) {
        cut(controller, tooLongReason(limits));
        return;
      }
      const under = options.events ? size.bytes : largest;
      if (inFlight.bytes - held + under > limits.inFlightBytes) {
        cut(
          controller,
          `the server's answers under way took more than ${limits.inFlightBytes} bytes together (MAX_UPSTREAM_ANSWER_BYTES_IN_FLIGHT)`,
        );
        return;
      }
      hold(under);
      if (watched) parser.feed(decoder.decode(chunk.value, { stream: true }));
      controller.enqueue(chunk.value);
    },
    cancel(reason) {
      hold(0);
      return reader.cancel(reason);
    },
  });
}

function tooLongReason(limits: AnswerLimits): string {
  return `the server sent a message longer than ${limits.messageBytes} bytes (MAX_UPSTREAM_MESSAGE_BYTES)`;
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as { cause?: unknown }).cause;
  return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
}
