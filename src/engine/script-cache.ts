/**
 * Bytecode of the scripts a runner sees more than once. Parsing and compiling even `return 1` costs 10-30 us in the
 * VM, loading its bytecode about a quarter of that; programs in particular run the same code with new inputs. A
 * script is compiled to bytecode the second time it runs, so one-off scripts never pay for it.
 */
import type { JSValueHandle, QuickJS } from "quickjs-wasi";
import { RepeatCache } from "./repeat-cache.ts";

export class ScriptCache {
  private readonly bytecode = new RepeatCache<Uint8Array>({
    entries: 64,
    counted: 256,
    maxSize: 4 * 1024 * 1024,
    sizeOf: (code) => code.byteLength,
  });

  constructor(private readonly filename: string) {}

  /** `source` evaluated in `qjs`: from its bytecode when this cache has it, else compiled from the text. */
  evaluate(qjs: QuickJS, source: string): JSValueHandle {
    const cached = this.bytecode.get(source);
    if (cached) return qjs.evalBytecode(cached);
    if (!this.bytecode.repeats(source)) return qjs.evalCode(source, this.filename);
    let code: Uint8Array;
    try {
      code = qjs.compile(source, this.filename);
    } catch {
      // Does not compile: evaluating the text reports the error the usual way.
      return qjs.evalCode(source, this.filename);
    }
    this.bytecode.set(source, code);
    return qjs.evalBytecode(code);
  }
}
