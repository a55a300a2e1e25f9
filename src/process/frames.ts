/**
 * The channel between the host and a sandboxed child process: length-prefixed JSON frames over a pipe. A frame is a
 * 4-byte big-endian byte count followed by that many bytes of UTF-8 JSON. The reader refuses a frame whose header
 * announces more than its limit before buffering it, and refuses text that is not valid UTF-8 or not JSON.
 */
import { ProtocolError } from "../engine/protocol.ts";

/**
 * Largest frame either side accepts. A value crossing the boundary is at most MAX_VALUE_CHARS (16 Mi) characters of
 * JSON, which JSON-escaping inside a frame can grow up to six-fold; the rest is headroom for the envelope.
 */
export const MAX_FRAME_BYTES = 128 * 1024 * 1024;
const HEADER_BYTES = 4;

/** Encodes one message as a frame. */
export function encodeFrame(message: unknown): Buffer {
  const body = Buffer.from(JSON.stringify(message), "utf8");
  if (body.length > MAX_FRAME_BYTES)
    throw new RangeError(`a frame of ${body.length} bytes is over the limit of ${MAX_FRAME_BYTES}`);
  const frame = Buffer.allocUnsafe(HEADER_BYTES + body.length);
  frame.writeUInt32BE(body.length, 0);
  body.copy(frame, HEADER_BYTES);
  return frame;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Splits a byte stream into decoded frames. After the first error it stays failed and ignores further input. */
export class FrameReader {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private failed = false;

  constructor(private readonly maxFrameBytes = MAX_FRAME_BYTES) {}

  /** Adds bytes and returns the messages they complete. Throws a ProtocolError on a malformed frame. */
  push(chunk: Buffer): unknown[] {
    if (this.failed) return [];
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const messages: unknown[] = [];
    try {
      for (;;) {
        if (this.buffered < HEADER_BYTES) break;
        const length = this.peekLength();
        if (length > this.maxFrameBytes) {
          throw new ProtocolError(`a frame of ${length} bytes is over the limit of ${this.maxFrameBytes}`);
        }
        if (this.buffered < HEADER_BYTES + length) break;
        const frame = this.take(HEADER_BYTES + length);
        let text: string;
        try {
          text = utf8.decode(frame.subarray(HEADER_BYTES));
        } catch {
          throw new ProtocolError("a frame is not valid UTF-8");
        }
        try {
          messages.push(JSON.parse(text));
        } catch {
          throw new ProtocolError("a frame is not JSON");
        }
      }
    } catch (error) {
      this.failed = true;
      this.chunks = [];
      this.buffered = 0;
      throw error;
    }
    return messages;
  }

  /** Bytes of an incomplete frame still waiting for the rest. */
  get pending(): number {
    return this.buffered;
  }

  private peekLength(): number {
    const first = this.chunks[0] as Buffer;
    if (first.length >= HEADER_BYTES) return first.readUInt32BE(0);
    const head = Buffer.concat(this.chunks, HEADER_BYTES);
    return head.readUInt32BE(0);
  }

  private take(bytes: number): Buffer {
    const first = this.chunks[0] as Buffer;
    let out: Buffer;
    if (first.length >= bytes) {
      out = first.subarray(0, bytes);
      if (first.length === bytes) this.chunks.shift();
      else this.chunks[0] = first.subarray(bytes);
    } else {
      const all = Buffer.concat(this.chunks, this.buffered);
      out = all.subarray(0, bytes);
      this.chunks = all.length > bytes ? [all.subarray(bytes)] : [];
    }
    this.buffered -= bytes;
    return out;
  }
}
