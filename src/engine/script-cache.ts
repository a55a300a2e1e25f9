/**
 * Bytecode of the scripts a runner sees more than once. Parsing and compiling even `return 1` costs 10-30 us in the
 * VM, loading its bytecode about a quarter of that; programs in particular run the same code with new inputs. A
 * script is compiled to bytecode the second time it runs, so one-off scripts never pay for it.
 */
import type { JSValueHandle, QuickJS } from "quickjs-wasi";

/** Scripts whose bytecode is kept, and their total size. */
const MAX_SCRIPTS = 64;
const MAX_BYTES = 4 * 1024 * 1024;
/** Scripts seen once that are remembered; past it the counts start over. */
const MAX_COUNTED = 256;

export class ScriptCache {
  private readonly bytecode = new Map<string, Uint8Array>();
  private readonly seen = new Set<string>();
  private bytes = 0;

  constructor(private readonly filename: string) {}

  /** `source` evaluated in `qjs`: from its bytecode when this cache has it, else compiled from the text. */
  evaluate(qjs: QuickJS, source: string): JSValueHandle {
    const cached = this.bytecode.get(source);
    if (cached) {
      // Least recently used first: move it to the end.
      this.bytecode.delete(source);
      this.bytecode.set(source, cached);
      return qjs.evalBytecode(cached);
    }
    if (!this.seen.has(source)) {
      if (this.seen.size >= MAX_COUNTED) this.seen.clear();
      this.seen.add(source);
      return qjs.evalCode(source, this.filename);
    }
    this.seen.delete(source);
    let code: Uint8Array;
    try {
      code = qjs.compile(source, this.filename);
    } catch {
      // Does not compile: evaluating the text reports the error the usual way.
      return qjs.evalCode(source, this.filename);
    }
    if (code.byteLength <= MAX_BYTES) this.keep(source, code);
    return qjs.evalBytecode(code);
  }

  private keep(source: string, code: Uint8Array): void {
    this.bytecode.set(source, code);
    this.bytes += code.byteLength;
    for (const [oldest, bytes] of this.bytecode) {
      if (this.bytecode.size <= MAX_SCRIPTS && this.bytes <= MAX_BYTES) break;
      this.bytecode.delete(oldest);
      this.bytes -= bytes.byteLength;
    }
  }
}
