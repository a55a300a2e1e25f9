/**
 * What HTTP clients can make the gateway hold, capped per request, per principal (whom a token names; every client
 * is one principal when no token is required) and in total: request bodies, requests in progress and sessions. A
 * request holds the bytes of its body from its first byte until its response ends, since its message (a program's
 * code) lives as long as the request does.
 */
import { MAX_STDIO_LINE_BYTES } from "./stdio.ts";

/** Largest request body accepted, in bytes (a script travels in one); the same as a message over stdio. */
export const MAX_HTTP_BODY_BYTES = MAX_STDIO_LINE_BYTES;
/**
 * Bytes of request bodies one principal's requests in progress hold together; past it a request gets 429. Reading and
 * parsing a body takes about three times its size for a moment.
 */
export const MAX_HTTP_BODY_BYTES_PER_PRINCIPAL = 2 * MAX_HTTP_BODY_BYTES;
/** Bytes of request bodies all requests in progress hold together; past it a request gets 503. */
export const MAX_HTTP_BODY_BYTES_TOTAL = 4 * MAX_HTTP_BODY_BYTES;
/** Requests of one principal in progress at once (an open GET stream counts); past it a request gets 429. */
export const MAX_HTTP_REQUESTS_PER_PRINCIPAL = 256;
/** Requests in progress at once, of every principal; past it a request gets 503. */
export const MAX_HTTP_REQUESTS_TOTAL = 1024;
/**
 * A session idle for less than this is not closed to make room for another of its principal: its client may be
 * between its initialize and its next request (or its GET stream).
 */
export const SESSION_EVICTION_GRACE_MS = 10_000;
/** The `Retry-After` of a 429 or 503 answer, in seconds: requests in progress end within a deadline. */
export const HTTP_RETRY_AFTER_S = 2;
/**
 * Longest time a request's headers and body may take to arrive (Node's `requestTimeout`, 300 s by default): a client
 * that declares a large body and sends it slowly, or not at all, holds its bytes no longer than this.
 */
export const HTTP_RECEIVE_TIMEOUT_MS = 60_000;

/** Why a request is not taken: the HTTP status and Airlock's message. */
export interface HttpRefusal {
  status: 413 | 429 | 503;
  message: string;
}

/** One request's hold on the budget: its body's bytes as they arrive, until `release()`. */
export interface RequestHold {
  /** Takes `bytes` more of the request's body, or says why not (nothing is taken then). */
  grow(bytes: number): HttpRefusal | undefined;
  /** Gives back everything the request held; again is a no-op. */
  release(): void;
}

interface Held {
  requests: number;
  bytes: number;
}

/** The bytes and requests in progress, per principal and in total. */
export class RequestBudget {
  private readonly byPrincipal = new Map<string, Held>();
  private readonly total: Held = { requests: 0, bytes: 0 };

  /** Requests and body bytes held now by `principal` (or, without one, by all principals together). */
  held(principal?: string): { requests: number; bodyBytes: number } {
    const held = principal === undefined ? this.total : this.byPrincipal.get(principal);
    return { requests: held?.requests ?? 0, bodyBytes: held?.bytes ?? 0 };
  }

  /** Admits one request of `principal`, or says why not. */
  admit(principal: string | undefined): RequestHold | HttpRefusal {
    const key = principal ?? "";
    const mine = this.byPrincipal.get(key) ?? { requests: 0, bytes: 0 };
    if (mine.requests >= MAX_HTTP_REQUESTS_PER_PRINCIPAL) {
      return busy(429, `this client has ${MAX_HTTP_REQUESTS_PER_PRINCIPAL} requests in progress, the most it may`);
    }
    if (this.total.requests >= MAX_HTTP_REQUESTS_TOTAL) {
      return busy(503, `the gateway has ${MAX_HTTP_REQUESTS_TOTAL} requests in progress, the most it takes`);
    }
    this.byPrincipal.set(key, mine);
    mine.requests++;
    this.total.requests++;
    let bytes = 0;
    let released = false;
    return {
      grow: (more) => {
        if (released) return undefined;
        if (bytes + more > MAX_HTTP_BODY_BYTES) {
          return {
            status: 413,
            message: `The request body is larger than ${MAX_HTTP_BODY_BYTES} bytes, the most the gateway takes`,
          };
        }
        if (mine.bytes + more > MAX_HTTP_BODY_BYTES_PER_PRINCIPAL) {
          return busy(
            429,
            `this client's requests in progress hold ${MAX_HTTP_BODY_BYTES_PER_PRINCIPAL} bytes of bodies, the most they may`,
          );
        }
        if (this.total.bytes + more > MAX_HTTP_BODY_BYTES_TOTAL) {
          return busy(
            503,
            `the requests in progress hold ${MAX_HTTP_BODY_BYTES_TOTAL} bytes of bodies, the most the gateway takes`,
          );
        }
        bytes += more;
        mine.bytes += more;
        this.total.bytes += more;
        return undefined;
      },
      release: () => {
        if (released) return;
        released = true;
        mine.requests--;
        mine.bytes -= bytes;
        this.total.requests--;
        this.total.bytes -= bytes;
        if (mine.requests === 0) this.byPrincipal.delete(key);
      },
    };
  }
}

export function isRefusal(value: RequestHold | HttpRefusal): value is HttpRefusal {
  return "status" in value;
}

function busy(status: 429 | 503, why: string): HttpRefusal {
  return { status, message: `Too busy: ${why}; try again in ${HTTP_RETRY_AFTER_S} s` };
}
