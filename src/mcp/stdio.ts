/**
 * The gateway's stdio transport: newline-delimited JSON-RPC on stdin and stdout, like the SDK's
 * `StdioServerTransport`, except that a line past `MAX_STDIO_LINE_BYTES` is answered with a JSON-RPC error and
 * skipped. The SDK's transport closes itself on a line past its 10 MiB buffer, which ended the session silently.
 */
import type { Readable, Writable } from "node:stream";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { type JSONRPCMessage, JSONRPCMessageSchema, type RequestId } from "@modelcontextprotocol/sdk/types.js";

/** Largest request line accepted over stdio, in bytes: the same as an HTTP request body. */
export const MAX_STDIO_LINE_BYTES = 32 * 1024 * 1024;

/** Bytes of a line kept to find its id in when the line is too long to parse. */
const HEAD_BYTES = 1024;

export class GatewayStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  private chunks: Buffer[] = [];
  private size = 0;
  /** The rest of a line that was too long is dropped until its newline. */
  private skipping = false;
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
        if (this.size > this.maxLineBytes) this.refuseLongLine();
      }
      if (newline === -1) return;
      if (!this.skipping) this.onLine(Buffer.concat(this.chunks).toString("utf8"));
      this.chunks = [];
      this.size = 0;
      this.skipping = false;
      start = newline + 1;
    }
  };

  private refuseLongLine(): void {
    const head = Buffer.concat(this.chunks, Math.min(this.size, HEAD_BYTES)).toString("utf8");
    this.chunks = [];
    this.skipping = true;
    const message = `The message is larger than ${this.maxLineBytes} bytes, the most airlock serve takes over stdio`;
    this.onerror?.(new Error(message));
    void this.send(errorResponse(leadingId(head), -32600, message));
  }

  private onLine(line: string): void {
    const text = line.endsWith("\r") ? line.slice(0, -1) : line;
    if (text.trim() === "") return;
    let message: JSONRPCMessage;
    try {
      message = JSONRPCMessageSchema.parse(JSON.parse(text));
    } catch (error) {
      this.onerror?.(error as Error);
      return;
    }
    this.onmessage?.(message);
  }
}

/**
 * The id of a message whose text starts with its id, after only `jsonrpc` or `method` (as clients write them): found
 * there it is the top-level id, not one nested in the params.
 */
function leadingId(head: string): RequestId | undefined {
  const match = /^\s*\{(?:\s*"(?:jsonrpc|method)"\s*:\s*"[^"\\]*"\s*,)*\s*"id"\s*:\s*(-?\d+|"[^"\\]*")\s*[,}]/.exec(
    head,
  );
  if (match === null) return undefined;
  const id = JSON.parse(match[1] as string) as RequestId;
  return typeof id === "number" && !Number.isSafeInteger(id) ? undefined : id;
}

function errorResponse(id: RequestId | undefined, code: number, message: string): JSONRPCMessage {
  // An error whose request's id is unknown carries none (the SDK's schema does not take null).
  return { jsonrpc: "2.0", ...(id === undefined ? {} : { id }), error: { code, message } } as JSONRPCMessage;
}
