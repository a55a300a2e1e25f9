import {
  MAX_ERROR_MESSAGE_CHARS,
  MAX_ERROR_NAME_CHARS,
  MAX_ERROR_STACK_CHARS,
  MAX_OUTPUT_CHARS,
  MAX_OUTPUT_ITEMS,
  MAX_STORE_TOTAL_CHARS,
  MAX_STORE_VALUE_CHARS,
  MAX_VALUE_CHARS,
} from "./limits.ts";

/** File name of the prelude in guest stacks; frames from it are removed before a stack reaches the host. */
export const PRELUDE_FILENAME = "airlock:prelude";
/** File name of the script in guest stacks. */
export const SCRIPT_FILENAME = "codemode.js";
/** Name of the single host function, registered before the prelude runs and removed by it. */
export const HOST_FUNCTION = "__airlock_host";

/** Members a "does not exist" error lists when no close match is found (more would flood the message). */
export const MAX_LISTED_MEMBERS = 20;
/** Close matches a "does not exist" error suggests at most. */
export const MAX_SUGGESTED_MEMBERS = 5;

/** Operations of the host function. The prelude is the only caller. */
export const Op = {
  /** (target: 0 tool | 1 global, name, argsJson | undefined) -> call id, or an error message string */
  call: 1,
  /**
   * (slot, argsJson | undefined) -> call id, or an error message string: a call of configured tool `slot >> 1`
   * (slot even) or global `slot >> 1` (slot odd), by position in the configuration, so no name crosses per call.
   */
  callSlot: 4,
  /** (kind: 0 text | 1 console | 2 image, text or base64, mimeType) -> undefined, or an error message string */
  output: 2,
  /** (ok, payloadJson | undefined, writesJson | undefined): the script ended */
  done: 3,
} as const;

/**
 * The script environment, evaluated once per VM before the post-prelude image is captured. It holds the host
 * function in a closure, builds `text`, `image`, `console`, `exit`, `store`, `load` on top of it, deep-freezes every
 * intrinsic (with the override mistake tamed) and makes the built-in globals read-only, closes the stack-trace hooks
 * through which the script could reach the prelude's functions, and returns the entry points the host calls:
 * `configure` (tools, globals and mode: the same for many executions, so a runner may capture its result as an
 * image), `prepare` (per execution: random seed and store), `start` (runs the compiled script) and `settle` (hands a
 * call's outcome back).
 *
 * Every value crosses the boundary as JSON text, serialized here with intrinsics captured before any script ran.
 */
export const PRELUDE_SOURCE = `(function () {
  "use strict";
  const host = globalThis.${HOST_FUNCTION};
  delete globalThis.${HOST_FUNCTION};
  const OP_CALL = ${Op.call}, OP_CALL_SLOT = ${Op.callSlot}, OP_OUTPUT = ${Op.output}, OP_DONE = ${Op.done};
  const MAX_OUTPUT_CHARS = ${MAX_OUTPUT_CHARS}, MAX_OUTPUT_ITEMS = ${MAX_OUTPUT_ITEMS};
  const MAX_STORE_VALUE_CHARS = ${MAX_STORE_VALUE_CHARS}, MAX_STORE_TOTAL_CHARS = ${MAX_STORE_TOTAL_CHARS};
  const MAX_VALUE_CHARS = ${MAX_VALUE_CHARS};
  const MAX_ERROR_MESSAGE_CHARS = ${MAX_ERROR_MESSAGE_CHARS}, MAX_ERROR_NAME_CHARS = ${MAX_ERROR_NAME_CHARS};
  const MAX_ERROR_STACK_CHARS = ${MAX_ERROR_STACK_CHARS};
  const MAX_LISTED_MEMBERS = ${MAX_LISTED_MEMBERS}, MAX_SUGGESTED_MEMBERS = ${MAX_SUGGESTED_MEMBERS};

  const O = Object, freeze = O.freeze, defineProperty = O.defineProperty, keys = O.keys;
  const getOwnPropertyNames = O.getOwnPropertyNames, getOwnPropertySymbols = O.getOwnPropertySymbols;
  const getOwnPropertyDescriptor = O.getOwnPropertyDescriptor, getPrototypeOf = O.getPrototypeOf;
  const setPrototypeOf = O.setPrototypeOf, ObjectPrototype = O.prototype;
  const apply = Reflect.apply, construct = Reflect.construct, stringify = JSON.stringify, parse = JSON.parse;
  const ErrorCtor = Error, TypeErrorCtor = TypeError, RangeErrorCtor = RangeError, PromiseCtor = Promise;
  const isError = typeof Error.isError === "function" ? Error.isError : (value) => value instanceof ErrorCtor;
  const promiseThen = Promise.prototype.then, MapCtor = Map, SetCtor = Set;
  const mapGet = Map.prototype.get, mapSet = Map.prototype.set, mapHas = Map.prototype.has, mapDelete = Map.prototype.delete;
  const setHas = Set.prototype.has;
  const StringCtor = String, isArray = Array.isArray, arrayPush = Array.prototype.push, arrayJoin = Array.prototype.join;
  const arraySlice = Array.prototype.slice;
  const stringSlice = String.prototype.slice, stringSplit = String.prototype.split, stringIndexOf = String.prototype.indexOf;
  const stringStartsWith = String.prototype.startsWith, stringCharCodeAt = String.prototype.charCodeAt;
  const stringReplace = String.prototype.replace, stringToLowerCase = String.prototype.toLowerCase;
  const regexpTest = RegExp.prototype.test;
  const mathFloor = Math.floor, mathMin = Math.min, mathMax = Math.max;

  // ---- nothing of the prelude reaches the script through stack traces ----
  // QuickJS-NG implements V8's Error.prepareStackTrace, whose call sites hand out the functions on the stack (the
  // prelude's own included), and Error.stackTraceLimit. Both are accessors that freezing Error does not stop: they
  // become fixed data properties before any script runs, so that stacks stay plain strings.
  for (const [name, value] of [["prepareStackTrace", undefined], ["stackTraceLimit", ErrorCtor.stackTraceLimit]]) {
    defineProperty(ErrorCtor, name, { value, writable: false, enumerable: false, configurable: false });
  }

  // ---- serialization ----
  function tooLong(what, length) {
    return new RangeErrorCtor(what + " is " + length + " characters of JSON, more than the limit of " + MAX_VALUE_CHARS);
  }
  function toJson(value, what) {
    const json = stringify(value);
    if (json !== undefined && json.length > MAX_VALUE_CHARS) throw tooLong(what, json.length);
    return json;
  }
  function safeString(value) {
    try { return StringCtor(value); } catch { return "[value that cannot be converted to a string]"; }
  }
  function isPrimitive(value) {
    return value === null || (typeof value !== "object" && typeof value !== "function");
  }
  /** A value as console.log prints it: strings as they are, errors with their stack, objects as JSON. */
  function formatValue(value) {
    if (typeof value === "string") return value;
    if (isPrimitive(value)) return safeString(value);
    if (isError(value)) return errorText(value, readName(value), readMessage(value));
    let json;
    try { json = stringify(value); } catch { json = undefined; }
    return json === undefined ? safeString(value) : json;
  }

  // ---- errors ----
  // Reading a thrown value's fields runs the script's code (getters, toString): each read may throw.
  function readName(error) {
    try { return StringCtor(error.name); } catch { return "Error"; }
  }
  function readMessage(error) {
    try {
      const message = error.message;
      return message === undefined ? "" : StringCtor(message);
    } catch { return ""; }
  }
  function readStack(error) {
    try {
      const stack = error.stack;
      return typeof stack === "string" ? stack : undefined;
    } catch { return undefined; }
  }
  // QuickJS stacks list frames only: drop the prelude's own frames (prefixing "Name: message" like V8 is errorText's).
  function cleanStack(stack) {
    if (typeof stack !== "string") return undefined;
    const lines = apply(stringSplit, stack, ["\\n"]);
    const kept = [];
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      if (line === "" || apply(stringIndexOf, line, ["${PRELUDE_FILENAME}"]) !== -1) continue;
      apply(arrayPush, kept, [line]);
    }
    return apply(arrayJoin, kept, ["\\n"]);
  }
  function errorText(error, name, message) {
    const head = message === "" ? name : name + ": " + message;
    const stack = readStack(error);
    const frames = cleanStack(stack === undefined ? undefined : clip(stack, MAX_ERROR_STACK_CHARS));
    return frames ? head + "\\n" + frames : head;
  }
  // What the host learns of a thrown value. Scripts follow pi-codemode: an Error's name and message as strings, any
  // other value as console.log prints it. Programs follow Mayura: only the string fields of what they threw count.
  let programMode = false;
  function describeError(error) {
    if (programMode) return describeProgramError(error);
    if (!isPrimitive(error) && isError(error)) {
      const name = clip(readName(error), MAX_ERROR_NAME_CHARS);
      const message = clip(readMessage(error), MAX_ERROR_MESSAGE_CHARS);
      return { name, message, stack: clip(errorText(error, name, message), MAX_ERROR_STACK_CHARS) };
    }
    return { message: clip(formatValue(error), MAX_ERROR_MESSAGE_CHARS) };
  }
  function describeProgramError(error) {
    if (isPrimitive(error)) return { message: clip(safeString(error), MAX_ERROR_MESSAGE_CHARS) };
    let name, message;
    try { name = error.name; } catch {}
    try { message = error.message; } catch {}
    name = typeof name === "string" ? clip(name, MAX_ERROR_NAME_CHARS) : undefined;
    message = typeof message === "string" ? clip(message, MAX_ERROR_MESSAGE_CHARS) : "";
    const out = { message };
    if (name) out.name = name;
    out.stack = clip(errorText(error, name ?? "Error", message), MAX_ERROR_STACK_CHARS);
    return out;
  }
  // What finish() reports for a thrown value. Describing it allocates; at the heap cap that may fail in turn.
  const OUT_OF_MEMORY = stringify({ name: "InternalError", message: "out of memory", stack: "InternalError: out of memory" });
  const UNDESCRIBABLE = stringify({ message: "The script threw a value that cannot be described" });
  function failurePayload(error) {
    try { return stringify(describeError(error)); }
    catch { return !isPrimitive(error) && getPrototypeOf(error) === internalErrorPrototype ? OUT_OF_MEMORY : UNDESCRIBABLE; }
  }
  // Cut here, not only on the host: a huge message would otherwise be turned into JSON and copied out whole.
  function clip(text, max) {
    if (text.length <= max) return text;
    const code = apply(stringCharCodeAt, text, [max - 1]);
    return apply(stringSlice, text, [0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max]) + "\u2026";
  }

  // ---- per-execution state (reset with the whole memory image after every execution) ----
  // Calls waiting for their outcome: id -> [resolve, reject]. Its Map methods are called directly: every intrinsic
  // is frozen before any script runs, and no script can reach this map.
  const pending = new MapCtor();
  let finished = false;
  let storeValues = new MapCtor();
  let storeWrites = new MapCtor();
  let storeTotal = 0;
  let outputChars = 0, outputItems = 0;
  const EXIT = freeze({});

  function finish(ok, payload) {
    if (finished) return;
    finished = true;
    let writes;
    // No writes, no JSON: most executions never touch the store.
    if (ok && storeWrites.size > 0) {
      try {
        const set = {}, del = [];
        const entries = [];
        storeWrites.forEach((json, key) => apply(arrayPush, entries, [[key, json]]));
        for (let i = 0; i < entries.length; i++) {
          const key = entries[i][0], json = entries[i][1];
          if (json === undefined) apply(arrayPush, del, [key]);
          else defineProperty(set, key, { value: json, enumerable: true, writable: true, configurable: true });
        }
        writes = stringify({ set, delete: del });
      } catch (error) {
        ok = false;
        payload = failurePayload(error);
      }
    }
    host(OP_DONE, ok, payload, writes);
  }

  // ---- calls ----
  // slot: a configured tool's or global's position (see OP_CALL_SLOT), or -1 for a call by name (programs).
  function call(slot, name, args) {
    if (finished) return new PromiseCtor(() => {});
    let json, id;
    try {
      json = stringify(args);
      if (json !== undefined && json.length > MAX_VALUE_CHARS) throw tooLong("the argument of " + name + "()", json.length);
    } catch (error) {
      return apply(promiseThen, PromiseCtor.resolve(), [() => { throw error; }]);
    }
    id = slot < 0 ? host(OP_CALL, 0, name, json) : host(OP_CALL_SLOT, slot, json);
    if (typeof id === "string") return apply(promiseThen, PromiseCtor.resolve(), [() => { throw new RangeErrorCtor(id); }]);
    const promise = new PromiseCtor(captureSettlers);
    pending.set(id, [capturedResolve, capturedReject]);
    return promise;
  }
  // One executor for every call's promise (no closure per call): it hands its resolve and reject to call().
  let capturedResolve, capturedReject;
  function captureSettlers(resolve, reject) {
    capturedResolve = resolve;
    capturedReject = reject;
  }
  function settle(id, ok, payload, properties) {
    const entry = pending.get(id);
    if (entry === undefined) return;
    pending.delete(id);
    if (ok) {
      entry[0](payload === undefined ? undefined : parse(payload));
      return;
    }
    const error = new ErrorCtor(payload);
    if (properties !== undefined) {
      const extra = parse(properties);
      const names = keys(extra);
      for (let i = 0; i < names.length; i++) {
        const key = names[i];
        if (key === "name" || key === "message" || key === "stack") continue;
        defineProperty(error, key, { value: extra[key], enumerable: true, writable: true, configurable: true });
      }
    }
    entry[1](error);
  }

  // ---- output ----
  function output(kind, data, mimeType) {
    if (finished) return;
    const failure = host(OP_OUTPUT, kind, data, mimeType);
    if (failure !== undefined) throw new RangeErrorCtor(failure);
  }
  // Primitives as their string form, anything else as JSON; a value JSON cannot hold (a cycle, a BigInt) throws a
  // TypeError and prints nothing.
  function text(value) {
    let rendered;
    if (isPrimitive(value)) rendered = safeString(value);
    else {
      try { rendered = stringify(value); }
      catch (error) {
        if (!(error instanceof TypeErrorCtor)) throw error;
        throw new TypeErrorCtor("text() cannot print this value as JSON: " + readMessage(error));
      }
      if (rendered === undefined) rendered = safeString(value);
    }
    output(0, rendered);
  }
  function makeConsoleMethod() {
    return function () {
      const parts = [];
      for (let i = 0; i < arguments.length; i++) apply(arrayPush, parts, [formatValue(arguments[i])]);
      output(1, apply(arrayJoin, parts, [" "]));
    };
  }
  const console = freeze({
    log: makeConsoleMethod(), info: makeConsoleMethod(), warn: makeConsoleMethod(),
    error: makeConsoleMethod(), debug: makeConsoleMethod(),
  });

  // ---- images ----
  const IMAGE_EXPECTS = 'image expects a non-empty image URL string, an object with image_url, or an image block { type: "image", data, mimeType }';
  const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;
  const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  function firstBytes(data, count) {
    const bytes = [];
    let bits = 0, buffer = 0;
    for (let i = 0; i < data.length && bytes.length < count; i++) {
      const c = apply(stringIndexOf, B64, [data[i]]);
      if (c < 0) break;
      buffer = (buffer << 6) | c;
      bits += 6;
      if (bits >= 8) { bits -= 8; apply(arrayPush, bytes, [(buffer >> bits) & 255]); }
    }
    return bytes;
  }
  // The formats providers accept inline, by their first bytes. FF D8 FF F7 starts JPEG-LS, which they refuse.
  function sniff(data) {
    const b = firstBytes(data, 12);
    if (b.length >= 8 && b[0] === 0x89 && b[1] === 0x50 && b[2] === 0x4e && b[3] === 0x47 && b[4] === 0x0d && b[5] === 0x0a && b[6] === 0x1a && b[7] === 0x0a) return "image/png";
    if (b.length >= 4 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff && b[3] !== 0xf7) return "image/jpeg";
    if (b.length >= 6 && b[0] === 0x47 && b[1] === 0x49 && b[2] === 0x46 && b[3] === 0x38 && (b[4] === 0x37 || b[4] === 0x39) && b[5] === 0x61) return "image/gif";
    if (b.length >= 12 && b[0] === 0x52 && b[1] === 0x49 && b[2] === 0x46 && b[3] === 0x46 && b[8] === 0x57 && b[9] === 0x45 && b[10] === 0x42 && b[11] === 0x50) return "image/webp";
    return undefined;
  }
  // The URL an image() argument stands for: a string, { image_url } (a string or OpenAI's { url }), or an image block
  // (MCP's and pi-ai's shape), whose data becomes a data: URL.
  function imageUrl(value) {
    if (typeof value === "string") return value;
    if (isPrimitive(value) || isArray(value)) throw new TypeErrorCtor(IMAGE_EXPECTS);
    const imageUrlField = value.image_url;
    if (imageUrlField !== undefined) {
      const url = !isPrimitive(imageUrlField) ? imageUrlField.url : imageUrlField;
      if (typeof url !== "string") throw new TypeErrorCtor(IMAGE_EXPECTS);
      return url;
    }
    const type = value.type;
    if (typeof type !== "string") throw new TypeErrorCtor(IMAGE_EXPECTS);
    if (type !== "image") throw new TypeErrorCtor('image only accepts image blocks, got ' + stringify(type));
    const data = value.data;
    if (typeof data !== "string" || data === "") throw new TypeErrorCtor("image expected image block data");
    if (apply(stringStartsWith, apply(stringToLowerCase, apply(stringSlice, data, [0, 5]), []), ["data:"])) return data;
    return "data:;base64," + data;
  }
  function image(value) {
    const url = imageUrl(value);
    if (url === "") throw new TypeErrorCtor(IMAGE_EXPECTS);
    const colon = apply(stringIndexOf, url, [":"]);
    const scheme = colon === -1 ? "" : apply(stringToLowerCase, apply(stringSlice, url, [0, colon]), []);
    if (scheme === "http" || scheme === "https") {
      throw new TypeErrorCtor("remote image URLs are not supported in tool outputs. Pass a base64 data URI instead");
    }
    const comma = apply(stringIndexOf, url, [","]);
    const header = comma === -1 ? [] : apply(stringSplit, apply(stringSlice, url, [colon + 1, comma]), [";"]);
    let base64 = false;
    for (let i = 1; i < header.length; i++) if (apply(stringToLowerCase, header[i], []) === "base64") base64 = true;
    if (scheme !== "data" || comma === -1 || !base64) {
      throw new TypeErrorCtor("invalid image output. Pass a base64 data URI instead");
    }
    // Wrapped base64 (line breaks) is accepted; a truncated or corrupted one is refused, as providers refuse it.
    const data = apply(stringReplace, apply(stringSlice, url, [comma + 1]), [/\\s+/g, ""]);
    if (data.length % 4 !== 0 || !apply(regexpTest, BASE64, [data])) {
      throw new TypeErrorCtor("invalid image output. The image data is not valid base64 (truncated or corrupted?)");
    }
    // The declared type is ignored in favour of the one the bytes show.
    const mimeType = sniff(data);
    if (mimeType === undefined) {
      throw new TypeErrorCtor("invalid image output. The image data is not a PNG, JPEG, GIF, or WebP image");
    }
    output(2, data, mimeType);
  }

  // ---- store ----
  function store(key, value) {
    if (typeof key !== "string") throw new TypeErrorCtor("store(key, value): key must be a string");
    if (finished) return;
    // The writes reach the host as { set: { key: value } }: a host that applies them with Object.assign would give
    // its own object the prototype the script chose.
    if (key === "__proto__" && value !== undefined) {
      throw new TypeErrorCtor('store("__proto__") is refused: a host applying the writes with Object.assign would change the prototype of its object. Use another key.');
    }
    // The value becomes JSON first: its toJSON may call store() itself, and the sizes below must be read after that.
    const json = value === undefined ? undefined : stringify(value);
    if (value !== undefined && json === undefined) {
      throw new TypeErrorCtor("store(" + stringify(key) + ") value is not JSON-serializable");
    }
    const previous = apply(mapGet, storeValues, [key]);
    // A key counts with its value: the store leaves the VM as key-value pairs.
    const previousSize = previous === undefined ? 0 : key.length + previous.length;
    if (json === undefined) {
      // Deleting a key the store does not hold writes nothing (and so cannot grow the writes without bound).
      if (previous === undefined) return;
      apply(mapDelete, storeValues, [key]);
      apply(mapSet, storeWrites, [key, undefined]);
      storeTotal -= previousSize;
      return;
    }
    if (json.length > MAX_STORE_VALUE_CHARS) {
      throw new RangeErrorCtor("store(" + stringify(key) + ") value has " + json.length + " characters of JSON, more than the limit of " + MAX_STORE_VALUE_CHARS + ". store() is for small state such as IDs or summaries. Show images with image() and keep large data in variables.");
    }
    const total = storeTotal - previousSize + key.length + json.length;
    // A host may hand in a store already past the limit: a write that does not grow it is still allowed.
    if (total > MAX_STORE_TOTAL_CHARS && total > storeTotal) {
      throw new RangeErrorCtor("store(" + stringify(key) + ") would bring the store to " + total + " characters of JSON, more than the limit of " + MAX_STORE_TOTAL_CHARS + ". Delete keys with store(key, undefined) first.");
    }
    apply(mapSet, storeValues, [key, json]);
    apply(mapSet, storeWrites, [key, json]);
    storeTotal = total;
  }
  function load(key) {
    if (typeof key !== "string") throw new TypeErrorCtor("load(key): key must be a string");
    const json = apply(mapGet, storeValues, [key]);
    return json === undefined ? undefined : parse(json);
  }

  function exit() {
    finish(true, undefined);
    throw EXIT;
  }

  // ---- randomness: the image freezes QuickJS's own PRNG state, so Math.random is reseeded per execution ----
  let s0 = 0x9e3779b9 | 0, s1 = 0x243f6a88 | 0, s2 = 0xb7e15162 | 0, s3 = 0x12345678 | 0;
  function random() {
    // xoshiro128** over four 32-bit words; 53 bits of two outputs make one double.
    function next() {
      const result = Math.imul(((Math.imul(s1, 5) << 7) | (Math.imul(s1, 5) >>> 25)), 9);
      const t = s1 << 9;
      s2 ^= s0; s3 ^= s1; s1 ^= s2; s0 ^= s3; s2 ^= t;
      s3 = (s3 << 11) | (s3 >>> 21);
      return result >>> 0;
    }
    const high = next() >>> 5, low = next() >>> 6;
    return (high * 67108864 + low) / 9007199254740992;
  }
  defineProperty(Math, "random", { value: random, writable: false, configurable: false, enumerable: false });

  // ---- InternalError: the engine makes every error its constructor builds uncatchable ----
  // QuickJS-NG marks the errors of the InternalError constructor uncatchable (as it marks interrupts), so that
  // \`try { throw new InternalError("x") } catch {}\` did not catch. The script's InternalError builds the same error
  // (its prototype, name and stack) through Error, which the engine lets the script catch.
  const NativeInternalError = globalThis.InternalError;
  const internalErrorPrototype = typeof NativeInternalError === "function" ? NativeInternalError.prototype : undefined;
  if (internalErrorPrototype !== undefined) {
    const InternalError = function InternalError(message) {
      const error = construct(ErrorCtor, arguments, new.target === undefined ? InternalError : new.target);
      // Its stack starts at the script's frame, as the engine's own InternalError's would (not at Reflect.construct).
      const stack = readStack(error);
      if (stack !== undefined) {
        let frames = cleanStack(stack);
        if (apply(stringStartsWith, frames, ["    at construct (native)"])) {
          const newline = apply(stringIndexOf, frames, ["\\n"]);
          frames = newline === -1 ? "" : apply(stringSlice, frames, [newline + 1]);
        }
        defineProperty(error, "stack", { value: frames, writable: true, enumerable: false, configurable: true });
      }
      return error;
    };
    defineProperty(InternalError, "prototype", { value: internalErrorPrototype, writable: false, enumerable: false, configurable: false });
    defineProperty(internalErrorPrototype, "constructor", { value: InternalError, writable: true, enumerable: false, configurable: true });
    setPrototypeOf(InternalError, ErrorCtor);
    defineProperty(globalThis, "InternalError", { value: InternalError, writable: true, enumerable: false, configurable: true });
  }

  // ---- freeze every intrinsic reachable from the global object ----
  // Freezing alone breaks ordinary code through the "override mistake": an inherited read-only data property forbids
  // an own one of the same name, so \`this.name = "E"\` in an Error subclass throws and \`o.toString = f\` is ignored.
  // As hardened JavaScript environments do, the properties code overrides become accessors on the frozen objects:
  // reading gives the built-in, assigning defines an own property on the object assigned to (every writable data
  // property of Object.prototype, and these names on every other intrinsic).
  const OVERRIDABLE = new SetCtor(["constructor", "name", "message", "toString", "toLocaleString", "valueOf", "toJSON"]);
  function overridable(object, key, value, enumerable) {
    const pair = getOwnPropertyDescriptor({
      get accessor() { return value; },
      set accessor(next) {
        if (this === object) {
          throw new TypeErrorCtor("Cannot assign to read only property '" + safeString(key) + "' of a built-in object");
        }
        if (isPrimitive(this)) return;
        defineProperty(this, key, { value: next, writable: true, enumerable: true, configurable: true });
      },
    }, "accessor");
    defineProperty(object, key, { get: pair.get, set: pair.set, enumerable, configurable: false });
    return pair;
  }
  const seen = new SetCtor();
  function deepFreeze(value) {
    if (isPrimitive(value) || apply(setHas, seen, [value])) return;
    seen.add(value);
    const names = getOwnPropertyNames(value);
    const symbols = getOwnPropertySymbols(value);
    for (let i = 0; i < names.length + symbols.length; i++) {
      const key = i < names.length ? names[i] : symbols[i - names.length];
      const desc = getOwnPropertyDescriptor(value, key);
      if (desc === undefined) continue;
      if ("value" in desc) {
        deepFreeze(desc.value);
        if (desc.writable && desc.configurable && (value === ObjectPrototype || (typeof key === "string" && apply(setHas, OVERRIDABLE, [key])))) {
          const pair = overridable(value, key, desc.value, desc.enumerable);
          deepFreeze(pair.get);
          deepFreeze(pair.set);
        }
      } else { deepFreeze(desc.get); deepFreeze(desc.set); }
    }
    deepFreeze(getPrototypeOf(value));
    freeze(value);
  }
  const globalNames = getOwnPropertyNames(globalThis);
  for (let i = 0; i < globalNames.length; i++) {
    const desc = getOwnPropertyDescriptor(globalThis, globalNames[i]);
    if (desc !== undefined && "value" in desc && desc.value !== globalThis) deepFreeze(desc.value);
  }
  deepFreeze(getPrototypeOf(globalThis));
  deepFreeze(getPrototypeOf(async function () {}));
  deepFreeze(getPrototypeOf(function* () {}));
  deepFreeze(getPrototypeOf(async function* () {}));
  deepFreeze(getPrototypeOf([][Symbol.iterator]()));
  deepFreeze(getPrototypeOf(new Map()[Symbol.iterator]()));
  deepFreeze(getPrototypeOf(new Set()[Symbol.iterator]()));
  deepFreeze(getPrototypeOf(""[Symbol.iterator]()));
  deepFreeze(getPrototypeOf(/x/[Symbol.matchAll]("")));
  // The built-in globals are read-only too, so that a script replacing JSON or Promise changes nothing but its own
  // view. Those a configuration may remove stay configurable until configure() has run (see lockGlobals).
  const REMOVABLE = new SetCtor(["WeakRef", "FinalizationRegistry"]);
  for (let i = 0; i < globalNames.length; i++) {
    const desc = getOwnPropertyDescriptor(globalThis, globalNames[i]);
    if (desc === undefined || !("value" in desc) || !desc.configurable) continue;
    defineProperty(globalThis, globalNames[i], { writable: false, configurable: apply(setHas, REMOVABLE, [globalNames[i]]) });
  }

  function fixed(name, value) {
    defineProperty(globalThis, name, { value, writable: false, configurable: false, enumerable: true });
  }
  const builtins = { text, image, console, exit, store, load };
  const builtinNames = keys(builtins);
  for (let i = 0; i < builtinNames.length; i++) {
    const value = builtins[builtinNames[i]];
    if (typeof value === "function") freeze(value);
    // In the image already (configuring them per execution costs more); a program's configure removes them again.
    defineProperty(globalThis, builtinNames[i], { value, writable: false, configurable: true, enumerable: true });
  }
  // After configure() removed what the configuration does not offer, nothing on the global object can be replaced.
  function lockGlobals() {
    const names = getOwnPropertyNames(globalThis);
    for (let i = 0; i < names.length; i++) {
      const desc = getOwnPropertyDescriptor(globalThis, names[i]);
      if (desc !== undefined && desc.configurable) defineProperty(globalThis, names[i], { configurable: false });
    }
  }
  // A program (as opposed to a script) sees standard JavaScript and its tools argument, nothing else.
  function callTool(toolId, input) {
    if (typeof toolId !== "string") throw new TypeErrorCtor("tools.call(toolId, input): toolId must be a string");
    return call(-1, toolId, input);
  }
  const programTools = freeze({ call: freeze(callTool) });

  // ---- members that do not exist ----
  // Reading a member that a tools object or a namespace of globals lacks throws an error that names it and the close
  // matches, instead of a later "not a function". \`in\`, Object.keys, JSON.stringify and the names of
  // Object.prototype (toString, constructor, ...) work as on any object: they read undefined.
  function comparable(name) {
    return apply(stringReplace, apply(stringToLowerCase, name, []), [/[^a-z0-9]/g, ""]);
  }
  // The same name but for case and separators, else names that contain it or that it contains, else the names
  // nearest by edit distance (a swap of two letters counting as one edit), a third of its letters at most.
  function closeMatches(name, candidates) {
    const wanted = comparable(name);
    const same = [], containing = [];
    let nearest = [], nearestDistance = mathMax(1, mathFloor(wanted.length / 3));
    for (let i = 0; i < candidates.length; i++) {
      const other = comparable(candidates[i]);
      if (other === wanted) apply(arrayPush, same, [candidates[i]]);
      else if (wanted !== "" && other !== "" && (apply(stringIndexOf, other, [wanted]) !== -1 || apply(stringIndexOf, wanted, [other]) !== -1)) apply(arrayPush, containing, [candidates[i]]);
      else {
        const d = distance(wanted, other);
        if (d < nearestDistance || (d === nearestDistance && nearest.length === 0)) { nearest = [candidates[i]]; nearestDistance = d; }
        else if (d === nearestDistance) apply(arrayPush, nearest, [candidates[i]]);
      }
    }
    const matches = same.length > 0 ? same : containing.length > 0 ? containing : nearest;
    return apply(arraySlice, matches, [0, MAX_SUGGESTED_MEMBERS]);
  }
  function distance(a, b) {
    if (a.length > 64 || b.length > 64) return Infinity;
    let before = [], row = [];
    for (let j = 0; j <= b.length; j++) row[j] = j;
    for (let i = 1; i <= a.length; i++) {
      const next = [i];
      for (let j = 1; j <= b.length; j++) {
        let d = mathMin(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
        if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = mathMin(d, before[j - 2] + 1);
        next[j] = d;
      }
      before = row;
      row = next;
    }
    return row[b.length];
  }
  function missingMember(label, names, hint) {
    return new Proxy(O.create(null), {
      get(_target, key) {
        if (typeof key !== "string" || key === "then" || key === "toJSON" || key in ObjectPrototype) return undefined;
        const close = closeMatches(key, names);
        let message = label + "." + key + " does not exist.";
        if (close.length > 0) {
          const named = [];
          for (let i = 0; i < close.length; i++) apply(arrayPush, named, [label + "." + close[i]]);
          message += " Did you mean " + apply(arrayJoin, named, [", "]) + "?";
        } else if (names.length <= MAX_LISTED_MEMBERS) {
          message += " Available: " + (names.length > 0 ? apply(arrayJoin, names, [", "]) : "none") + ".";
        }
        if (hint) message += " " + hint;
        throw new TypeErrorCtor(message + " Check for a member with " + stringify(key) + " in " + label + ".");
      },
      set() { return false; },
      defineProperty() { return false; },
      deleteProperty() { return false; },
    });
  }

  // ---- entry points for the host ----
  function configure(configJson) {
    const config = parse(configJson);
    programMode = config.program === true;
    if (config.program) {
      for (let i = 0; i < builtinNames.length; i++) delete globalThis[builtinNames[i]];
    }
    if (config.deterministic) {
      delete globalThis.WeakRef;
      delete globalThis.FinalizationRegistry;
    }
    const identifiers = [];
    const list = [];
    for (let i = 0; i < config.tools.length; i++) apply(arrayPush, identifiers, [config.tools[i].id]);
    // Tools are own properties, found without a trap; a name that is not one reaches the Proxy behind them, which
    // explains the mistake.
    const tools = O.create(missingMember("tools", identifiers, "ALL_TOOLS lists every tool."));
    for (let i = 0; i < config.tools.length; i++) {
      const tool = config.tools[i];
      const slot = i * 2;
      const fn = freeze({ [tool.id]: function (args) { return call(slot, tool.name, args); } }[tool.id]);
      defineProperty(tools, tool.id, { value: fn, enumerable: true });
      if (tool.name !== tool.id) defineProperty(tools, tool.name, { value: fn, enumerable: true });
      apply(arrayPush, list, [freeze({ name: tool.id, description: tool.description })]);
    }
    // A program reaches its tools through its argument only (see programTools).
    if (!config.program) {
      fixed("tools", freeze(tools));
      fixed("ALL_TOOLS", freeze(list));
    }

    const namespaces = O.create(null);
    for (let i = 0; i < config.globals.length; i++) {
      const global = config.globals[i];
      const name = global.name;
      const slot = i * 2 + 1;
      const fn = global.spread
        ? function () { const args = []; for (let j = 0; j < arguments.length; j++) apply(arrayPush, args, [arguments[j]]); return call(slot, name, args); }
        : function (args) { return call(slot, name, args); };
      freeze(fn);
      const dot = apply(stringIndexOf, name, ["."]);
      if (dot === -1) fixed(name, fn);
      else {
        const ns = apply(stringSlice, name, [0, dot]);
        if (namespaces[ns] === undefined) namespaces[ns] = [];
        apply(arrayPush, namespaces[ns], [[apply(stringSlice, name, [dot + 1]), fn]]);
      }
    }
    const nsNames = keys(namespaces);
    for (let i = 0; i < nsNames.length; i++) {
      const members = namespaces[nsNames[i]];
      const memberNames = [];
      for (let j = 0; j < members.length; j++) apply(arrayPush, memberNames, [members[j][0]]);
      const object = O.create(missingMember(nsNames[i], memberNames, ""));
      for (let j = 0; j < members.length; j++) defineProperty(object, members[j][0], { value: members[j][1], enumerable: true });
      fixed(nsNames[i], freeze(object));
    }
    lockGlobals();
  }

  // Per execution, after configure (or in a VM restored from an image captured after it): the random seed and the
  // store's values.
  function prepare(seed0, seed1, seed2, seed3, storeJson) {
    s0 = seed0 | 0; s1 = seed1 | 0; s2 = seed2 | 0; s3 = seed3 | 0;
    if ((s0 | s1 | s2 | s3) === 0) s0 = 1;
    if (storeJson === undefined) return;
    const values = parse(storeJson);
    const storeKeys = keys(values);
    for (let i = 0; i < storeKeys.length; i++) {
      const json = values[storeKeys[i]];
      apply(mapSet, storeValues, [storeKeys[i], json]);
      storeTotal += storeKeys[i].length + json.length;
    }
  }

  function start(fn, programInput) {
    if (typeof fn !== "function") {
      finish(false, stringify({ name: "SyntaxError", message: "the script did not compile to a function" }));
      return;
    }
    let promise;
    try {
      promise = programInput === undefined ? fn() : fn(parse(programInput), programTools);
    } catch (error) {
      if (error !== EXIT) finish(false, failurePayload(error));
      return;
    }
    apply(promiseThen, promise, [
      (value) => {
        if (finished) return;
        let json;
        try { json = toJson(value, "the return value"); }
        catch (error) { finish(false, failurePayload(error)); return; }
        finish(true, json);
      },
      (error) => {
        if (error === EXIT || finished) return;
        finish(false, failurePayload(error));
      },
    ]);
  }

  return freeze({ configure, prepare, start, settle });
})()`;
