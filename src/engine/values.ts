/**
 * Primitive values across the wasm boundary without quickjs-wasi handles. The host function and the entry points
 * only ever exchange numbers, booleans, strings and undefined; on the hot path (one round per tool call) a handle
 * object, a name lookup and a scoped dispose per value cost more than the values themselves. This talks to the
 * instance's exports directly (quickjs-wasi's C interface, pinned version): a value crosses as a malloc'd `JSValue*`
 * box, which `qjs_free_value` frees.
 */
import { utf8Length } from "../platform/platform.ts";

/** The exports this module uses. */
export interface ValueExports {
  memory: WebAssembly.Memory;
  wasm_malloc(size: number): number;
  wasm_free(ptr: number): void;
  qjs_new_number(value: number): number;
  qjs_new_string(ptr: number, length: number): number;
  qjs_get_undefined(): number;
  qjs_get_true(): number;
  qjs_get_false(): number;
  qjs_get_float64(box: number): number;
  qjs_get_bool(box: number): number;
  qjs_typeof(box: number): number;
  qjs_get_string_len(box: number, lengthPtr: number): number;
  qjs_free_cstring(ptr: number): void;
  qjs_free_value(box: number): void;
  qjs_call(fn: number, self: number, argc: number, argv: number): number;
  qjs_is_exception(box: number): number;
}

export type Primitive = number | string | boolean | undefined;

/** QuickJS's tag of string values (JS_TAG_STRING), as `qjs_typeof` reports it. */
const TAG_STRING = -7;

/** ES2024's String.prototype.isWellFormed (in Node 20; not in the ES2023 lib the build targets). */
type WellFormedCheck = { isWellFormed(): boolean };

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The arguments of one call of the host function, read on demand. */
export interface HostArgs {
  readonly length: number;
  number(index: number): number;
  boolean(index: number): boolean;
  /** The argument if it is a string, else undefined (no conversion runs guest code). */
  string(index: number): string | undefined;
}

export class GuestValues {
  constructor(
    private readonly ex: ValueExports,
    /** Strings with lone surrogates go through quickjs-wasi's WTF-8 coding, which keeps them exact. */
    private readonly wtf8: { read(box: number): string; write(value: string): number },
  ) {}

  /** A new box holding `value`; the receiver frees it. */
  box(value: Primitive): number {
    const ex = this.ex;
    switch (typeof value) {
      case "number":
        return ex.qjs_new_number(value);
      case "string":
        return this.newString(value);
      case "boolean":
        return value ? ex.qjs_get_true() : ex.qjs_get_false();
      default:
        return ex.qjs_get_undefined();
    }
  }

  private newString(value: string): number {
    if (!(value as unknown as WellFormedCheck).isWellFormed()) return this.wtf8.write(value);
    const ex = this.ex;
    // UTF-8 takes at most 3 bytes per UTF-16 unit; long strings get their exact size instead of a 3x buffer.
    const capacity = value.length < 4096 ? value.length * 3 : utf8Length(value);
    const buffer = ex.wasm_malloc(capacity + 1);
    if (buffer === 0) throw new Error("the VM could not allocate a string");
    try {
      const { written } = encoder.encodeInto(value, new Uint8Array(ex.memory.buffer, buffer, capacity));
      return ex.qjs_new_string(buffer, written);
    } finally {
      ex.wasm_free(buffer);
    }
  }

  number(box: number): number {
    return this.ex.qjs_get_float64(box);
  }

  boolean(box: number): boolean {
    return this.ex.qjs_get_bool(box) !== 0;
  }

  /** The string in `box`, or undefined when it holds something else. */
  string(box: number): string | undefined {
    const ex = this.ex;
    if (ex.qjs_typeof(box) !== TAG_STRING) return undefined;
    const lengthPtr = ex.wasm_malloc(4);
    if (lengthPtr === 0) throw new Error("the VM could not allocate a string");
    let chars = 0;
    try {
      chars = ex.qjs_get_string_len(box, lengthPtr);
      if (chars === 0) throw new Error("the VM could not read a string");
      const memory = ex.memory.buffer;
      const length = new DataView(memory).getUint32(lengthPtr, true);
      const bytes = new Uint8Array(memory, chars, length);
      // QuickJS writes a lone surrogate as the 3-byte sequence ED A0..BF xx, which UTF-8 decoding would replace.
      for (let i = bytes.indexOf(0xed); i !== -1 && i < length - 1; i = bytes.indexOf(0xed, i + 1)) {
        if ((bytes[i + 1] as number) >= 0xa0) return this.wtf8.read(box);
      }
      return decoder.decode(bytes);
    } finally {
      if (chars !== 0) ex.qjs_free_cstring(chars);
      ex.wasm_free(lengthPtr);
    }
  }

  free(box: number): void {
    this.ex.qjs_free_value(box);
  }

  /**
   * Calls the function in box `fn` with `args` (boxed here and freed after). Returns the result's box, or 0 when the
   * call threw: the exception is then pending in the VM.
   */
  call(fn: number, args: readonly Primitive[]): number {
    const ex = this.ex;
    const self = ex.qjs_get_undefined();
    const argv = ex.wasm_malloc(args.length * 4 || 4);
    const boxes: number[] = [];
    try {
      for (const arg of args) boxes.push(this.box(arg));
      const view = new DataView(ex.memory.buffer);
      for (let i = 0; i < boxes.length; i++) view.setUint32(argv + i * 4, boxes[i] as number, true);
      const result = ex.qjs_call(fn, self, boxes.length, argv);
      if (ex.qjs_is_exception(result) === 0) return result;
      ex.qjs_free_value(result);
      return 0;
    } finally {
      for (const box of boxes) ex.qjs_free_value(box);
      ex.wasm_free(argv);
      ex.qjs_free_value(self);
    }
  }

  /** The arguments of a host-function call: `argc` boxes at `argv`, owned by QuickJS's trampoline. */
  hostArgs(argc: number, argv: number): HostArgs {
    const boxes = new Uint32Array(argc);
    if (argc > 0) boxes.set(new Uint32Array(this.ex.memory.buffer, argv, argc));
    const at = (index: number) => (index < argc ? (boxes[index] as number) : 0);
    return {
      length: argc,
      number: (index) => {
        const box = at(index);
        return box === 0 ? Number.NaN : this.number(box);
      },
      boolean: (index) => {
        const box = at(index);
        return box !== 0 && this.boolean(box);
      },
      string: (index) => {
        const box = at(index);
        return box === 0 ? undefined : this.string(box);
      },
    };
  }
}
