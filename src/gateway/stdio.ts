/**
 * The gateway's stdio transport: newline-delimited JSON-RPC on stdin and stdout, like the SDK's
 * `StdioServerTransport`, except that a line past `MAX_STDIO_LINE_BYTES` is answered with a JSON-RPC error and
 * skipped, and so is a request that is not JSON-RPC 2.0. The SDK's transport closes itself on a line past its 10 MiB
 * buffer, which ended the session silently, and leaves an invalid request unanswered.
 */
import type { Readable, Writable } from "node:stream";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { type JSONRPCMessage, JSONRPCMessageSchema, type RequestId } from "@modelcontextprotocol/sdk/types.js";

/** Largest request line accepted over stdio, in bytes: the same as an HTTP request body. */
export const MAX_STDIO_LINE_BYTES = 32 * 1024 * 1024;

/** Bytes kept of each end of a line too long to parse, to find its id in. */
export const END_BYTES = 1024;

export class GatewayStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  private chunks: Buffer[] = [];
  private size = 0;
  /** The rest of a line that was too long is dropped until its newline, keeping only its last bytes. */
  private skipping = false;
  private head = "";
  private tail: Buffer = Buffer.alloc(0);
  private closed = false;

  constructor(
    private readonly stdin: Readable,
    private readonly stdout: Writable,
    private readonly maxLineBytes = MAX_STDIO_LINE_BYTES,
  ) {}

  async start(): Promise<void> {
    this.stdin.on("data", this.onData);
    this.stdin.on("error", this.onStdinError);
  }

  send(message: JSONRPCMessage): Promise<void> {
    return new Promise((resolve) => {
      if (this.stdout.write(`${JSON.stringify(message)}\n`)) resolve();
      else this.stdout.once("drain", resolve);
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stdin.off("data", this.onData);
    this.stdin.off("error", this.onStdinError);
    if (this.stdin.listenerCount("data") === 0) this.stdin.pause();
    this.chunks = [];
    this.onclose?.();
  }

  private readonly onStdinError = (error: Error) => this.onerror?.(error);

  private readonly onData = (data: Buffer | string) => {
    const chunk = typeof data === "string" ? Buffer.from(data) : data;
    let start = 0;
    while (!this.closed) {
      const newline = chunk.indexOf(10, start);
      const end = newline === -1 ? chunk.length : newline;
      if (!this.skipping) {
        this.size += end - start;
        this.chunks.push(chunk.subarray(start, end));
        if (this.size > this.maxLineBytes) this.startSkipping();
      }
      if (this.skipping) this.keepTail(chunk.subarray(start, end));
      if (newline === -1) return;
      if (this.skipping) this.refuseLongLine();
      else this.onLine(Buffer.concat(this.chunks).toString("utf8"));
      this.chunks = [];
      this.size = 0;
      this.skipping = false;
      start = newline + 1;
    }
  };

  private startSkipping(): void {
    this.head = Buffer.concat(this.chunks, Math.min(this.size, END_BYTES)).toString("utf8");
    this.tail = Buffer.concat(this.chunks).subarray(-END_BYTES);
    this.chunks = [];
    this.skipping = true;
  }

  private keepTail(bytes: Buffer): void {
    this.tail =
      bytes.length >= END_BYTES ? bytes.subarray(-END_BYTES) : Buffer.concat([this.tail, bytes]).subarray(-END_BYTES);
  }

  /** Answered once the line ended, so that an id written after the params is found too. */
  private refuseLongLine(): void {
    const id = leadingId(this.head) ?? trailingId(this.tail.toString("utf8"));
    this.head = "";
    this.tail = Buffer.alloc(0);
    this.refuse(
      id,
      -32600,
      `The message is larger than ${this.maxLineBytes} bytes, the most airlock serve takes over stdio`,
    );
  }

  private onLine(line: string): void {
    const text = line.endsWith("\r") ? line.slice(0, -1) : line;
    if (text.trim() === "") return;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (error) {
      this.refuse(undefined, -32700, `Parse error: ${(error as Error).message}`);
      return;
    }
    const parsed = JSONRPCMessageSchema.safeParse(value);
    if (parsed.success) {
      this.onmessage?.(parsed.data);
      return;
    }
    // A request gets an answer, as over HTTP. Answering a malformed response could settle a request of the client's
    // own with the same id, so that is only reported.
    const request = typeof value === "object" && value !== null && "method" in value ? value : undefined;
    if (request === undefined) this.onerror?.(new Error("Invalid JSON-RPC message (not a request)"));
    else this.refuse(requestId(request), -32600, `Invalid Request: ${invalidReason(request)}`);
  }

  private refuse(id: RequestId | undefined, code: number, message: string): void {
    this.onerror?.(new Error(message));
    void this.send(errorResponse(id, code, message));
  }
}

function requestId(request: object): RequestId | undefined {
  const id = (request as { id?: unknown }).id;
  return typeof id === "string" || Number.isSafeInteger(id) ? (id as RequestId) : undefined;
}

function invalidReason(request: object): string {
  const { jsonrpc, method, params } = request as { jsonrpc?: unknown; method?: unknown; params?: unknown };
  if (jsonrpc !== "2.0") return '"jsonrpc" must be "2.0"';
  if (typeof method !== "string") return '"method" must be a string';
  if (params !== undefined && (typeof params !== "object" || params === null || Array.isArray(params))) {
    return '"params" must be an object';
  }
  return "not a JSON-RPC 2.0 request as MCP defines it";
}

/**
 * The id of a message whose text starts with its id, after only `jsonrpc` or `method` (as clients write them): found
 * there it is the top-level id, not one nested in the params.
 */
export function leadingId(head: string): RequestId | undefined {
  const match = /^\s*\{(?:\s*"(?:jsonrpc|method)"\s*:\s*"[^"\\]*"\s*,)*\s*"id"\s*:\s*(-?\d+|"[^"\\]*")\s*[,}]/.exec(
    head,
  );
  return match === null ? undefined : parseId(match[1] as string);
}

/**
 * The id of a message whose text ends with its id: the member before the line's last brace, which closes the
 * top-level object, is one of that object's own.
 */
function trailingId(tail: string): RequestId | undefined {
  const match = /[{,]\s*"id"\s*:\s*(-?\d+|"[^"\\]*")\s*\}\s*$/.exec(tail);
  return match === null ? undefined : parseId(match[1] as string);
}

function parseId(text: string): RequestId | undefined {
  const id = JSON.parse(text) as RequestId;
  return typeof id === "number" && !Number.isSafeInteger(id) ? undefined : id;
}

function errorResponse(id: RequestId | undefined, code: number, message: string): JSONRPCMessage {
  // An error whose request's id is unknown carries none (the SDK's schema does not take null).
  return { jsonrpc: "2.0", ...(id === undefined ? {} : { id }), error: { code, message } } as JSONRPCMessage;
}
