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
 * intrinsic, and returns the entry points the host calls: `configure` (tools, globals and mode: the same for many
 * executions, so a runner may capture its result as an image), `prepare` (per execution: random seed and store),
 * `start` (runs the compiled script) and `settle` (hands a call's outcome back).
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

  const O = Object, freeze = O.freeze, defineProperty = O.defineProperty, keys = O.keys;
  const getOwnPropertyNames = O.getOwnPropertyNames, getOwnPropertySymbols = O.getOwnPropertySymbols;
  const getOwnPropertyDescriptor = O.getOwnPropertyDescriptor, getPrototypeOf = O.getPrototypeOf;
  const apply = Reflect.apply, stringify = JSON.stringify, parse = JSON.parse;
  const ErrorCtor = Error, TypeErrorCtor = TypeError, RangeErrorCtor = RangeError, PromiseCtor = Promise;
  const promiseThen = Promise.prototype.then, MapCtor = Map;
  const mapGet = Map.prototype.get, mapSet = Map.prototype.set, mapHas = Map.prototype.has, mapDelete = Map.prototype.delete;
  const StringCtor = String, isArray = Array.isArray, arrayPush = Array.prototype.push, arrayJoin = Array.prototype.join;
  const stringSlice = String.prototype.slice, stringSplit = String.prototype.split, stringIndexOf = String.prototype.indexOf;
  const stringStartsWith = String.prototype.startsWith, stringCharCodeAt = String.prototype.charCodeAt;
  const stringReplace = String.prototype.replace, stringTrim = String.prototype.trim, regexpTest = RegExp.prototype.test;
  const mathFloor = Math.floor, mathMin = Math.min;

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
  function textOf(value) {
    if (typeof value === "string") return value;
    let json;
    try { json = stringify(value); } catch { json = undefined; }
    return json === undefined ? safeString(value) : json;
  }

  // QuickJS stacks list frames only: prefix "Name: message" like V8 and drop the prelude's own frames.
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
  function describeError(error) {
    if (error !== null && (typeof error === "object" || typeof error === "function")) {
      let name, message, stack;
      try { name = error.name; } catch {}
      try { message = error.message; } catch {}
      try { stack = error.stack; } catch {}
      name = typeof name === "string" ? clip(name, MAX_ERROR_NAME_CHARS) : undefined;
      message = clip(typeof message === "string" ? message : safeString(error), MAX_ERROR_MESSAGE_CHARS);
      const frames = cleanStack(typeof stack === "string" ? clip(stack, MAX_ERROR_STACK_CHARS) : undefined);
      const head = name ? name + ": " + message : message;
      const out = { message };
      if (name) out.name = name;
      out.stack = clip(frames ? head + "\\n" + frames : head, MAX_ERROR_STACK_CHARS);
      return out;
    }
    return { message: clip(safeString(error), MAX_ERROR_MESSAGE_CHARS) };
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
        payload = stringify(describeError(error));
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
  function text(value) {
    output(0, textOf(value));
  }
  function makeConsoleMethod() {
    return function () {
      const parts = [];
      for (let i = 0; i < arguments.length; i++) apply(arrayPush, parts, [textOf(arguments[i])]);
      output(1, apply(arrayJoin, parts, [" "]));
    };
  }
  const console = freeze({
    log: makeConsoleMethod(), info: makeConsoleMethod(), warn: makeConsoleMethod(),
    error: makeConsoleMethod(), debug: makeConsoleMethod(),
  });

  // ---- images ----
  const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
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
  function sniff(data) {
    const b = firstBytes(data, 12);
    if (b.length >= 8 && b[0] === 0x89 && b[1] === 0x50 && b[2] === 0x4e && b[3] === 0x47 && b[4] === 0x0d && b[5] === 0x0a && b[6] === 0x1a && b[7] === 0x0a) return "image/png";
    if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return "image/jpeg";
    if (b.length >= 6 && b[0] === 0x47 && b[1] === 0x49 && b[2] === 0x46 && b[3] === 0x38 && (b[4] === 0x37 || b[4] === 0x39) && b[5] === 0x61) return "image/gif";
    if (b.length >= 12 && b[0] === 0x52 && b[1] === 0x49 && b[2] === 0x46 && b[3] === 0x46 && b[8] === 0x57 && b[9] === 0x45 && b[10] === 0x42 && b[11] === 0x50) return "image/webp";
    return undefined;
  }
  function imageFromUrl(url) {
    if (typeof url !== "string") throw new TypeErrorCtor("invalid image output. Expected a base64 data: URL string");
    if (!apply(stringStartsWith, url, ["data:"])) {
      throw new TypeErrorCtor("remote image URLs are not supported. Pass a base64 data: URL instead");
    }
    const comma = apply(stringIndexOf, url, [","]);
    const header = comma < 0 ? "" : apply(stringSlice, url, [5, comma]);
    if (comma < 0 || apply(stringIndexOf, header, [";base64"]) === -1) {
      throw new TypeErrorCtor("invalid image output. Expected a data: URL with base64 data (data:image/png;base64,...)");
    }
    return apply(stringSlice, url, [comma + 1]);
  }
  function image(value) {
    let data;
    if (typeof value === "string") data = imageFromUrl(value);
    else if (value !== null && typeof value === "object" && value.type === "image") data = value.data;
    else if (value !== null && typeof value === "object" && "image_url" in value) {
      const url = value.image_url;
      data = imageFromUrl(url !== null && typeof url === "object" ? url.url : url);
    } else {
      throw new TypeErrorCtor("invalid image output. Pass a base64 data: URL, { image_url }, or { type: \\"image\\", data, mimeType }");
    }
    if (typeof data !== "string") throw new TypeErrorCtor("invalid image output. The image data must be a base64 string");
    data = apply(stringReplace, data, [/\\s+/g, ""]);
    if (data.length === 0 || data.length % 4 !== 0 || !apply(regexpTest, BASE64, [data])) {
      throw new TypeErrorCtor("invalid image output. The image data is not valid base64 (truncated or corrupted?)");
    }
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
      throw new RangeErrorCtor("store(" + stringify(key) + ") value has " + json.length + " characters of JSON, more than the limit of " + MAX_STORE_VALUE_CHARS + ". store() is for small state such as IDs or summaries; keep large data in variables.");
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

  // ---- freeze every intrinsic reachable from the global object ----
  const seen = new Set();
  function deepFreeze(value) {
    if (value === null || (typeof value !== "object" && typeof value !== "function") || seen.has(value)) return;
    seen.add(value);
    const names = getOwnPropertyNames(value);
    const symbols = getOwnPropertySymbols(value);
    for (let i = 0; i < names.length + symbols.length; i++) {
      const key = i < names.length ? names[i] : symbols[i - names.length];
      const desc = getOwnPropertyDescriptor(value, key);
      if (desc === undefined) continue;
      if ("value" in desc) deepFreeze(desc.value);
      else { deepFreeze(desc.get); deepFreeze(desc.set); }
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
  // A program (as opposed to a script) sees standard JavaScript and its tools argument, nothing else.
  function callTool(toolId, input) {
    if (typeof toolId !== "string") throw new TypeErrorCtor("tools.call(toolId, input): toolId must be a string");
    return call(-1, toolId, input);
  }
  const programTools = freeze({ call: freeze(callTool) });

  // ---- entry points for the host ----
  function closest(name, candidates) {
    let best, bestScore = Infinity;
    const lower = apply(String.prototype.toLowerCase, name, []);
    for (let i = 0; i < candidates.length; i++) {
      const c = apply(String.prototype.toLowerCase, candidates[i], []);
      if (apply(stringIndexOf, c, [lower]) !== -1 || apply(stringIndexOf, lower, [c]) !== -1) return candidates[i];
      const d = distance(lower, c);
      if (d < bestScore) { bestScore = d; best = candidates[i]; }
    }
    return bestScore <= mathFloor(name.length / 2) + 1 ? best : undefined;
  }
  function distance(a, b) {
    if (a.length > 64 || b.length > 64) return Infinity;
    let row = [];
    for (let j = 0; j <= b.length; j++) row[j] = j;
    for (let i = 1; i <= a.length; i++) {
      const next = [i];
      for (let j = 1; j <= b.length; j++) {
        next[j] = mathMin(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      }
      row = next;
    }
    return row[b.length];
  }

  function configure(configJson) {
    const config = parse(configJson);
    if (config.program) {
      for (let i = 0; i < builtinNames.length; i++) delete globalThis[builtinNames[i]];
    }
    if (config.deterministic) {
      delete globalThis.WeakRef;
      delete globalThis.FinalizationRegistry;
    }
    const identifiers = [];
    const list = [];
    // Tools are own properties, found without a trap; a name that is not one reaches the Proxy behind them, which
    // explains the mistake.
    const missing = new Proxy(O.create(null), {
      get(_target, key) {
        if (typeof key !== "string" || key === "then" || key === "toJSON") return undefined;
        const hint = closest(key, identifiers);
        throw new TypeErrorCtor("tools." + key + " does not exist." + (hint ? " Did you mean tools." + hint + "?" : "") +
          " Available: " + (identifiers.length ? apply(arrayJoin, identifiers, [", "]) : "none") + ". ALL_TOOLS lists every tool.");
      },
      set() { return false; },
      defineProperty() { return false; },
      deleteProperty() { return false; },
    });
    const tools = O.create(missing);
    for (let i = 0; i < config.tools.length; i++) {
      const tool = config.tools[i];
      const slot = i * 2;
      const fn = freeze({ [tool.id]: function (args) { return call(slot, tool.name, args); } }[tool.id]);
      defineProperty(tools, tool.id, { value: fn, enumerable: true });
      if (tool.name !== tool.id) defineProperty(tools, tool.name, { value: fn, enumerable: true });
      apply(arrayPush, identifiers, [tool.id]);
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
        if (namespaces[ns] === undefined) namespaces[ns] = {};
        namespaces[ns][apply(stringSlice, name, [dot + 1])] = fn;
      }
    }
    const nsNames = keys(namespaces);
    for (let i = 0; i < nsNames.length; i++) fixed(nsNames[i], freeze(namespaces[nsNames[i]]));
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
      if (error !== EXIT) finish(false, stringify(describeError(error)));
      return;
    }
    apply(promiseThen, promise, [
      (value) => {
        if (finished) return;
        let json;
        try { json = toJson(value, "the return value"); }
        catch (error) { finish(false, stringify(describeError(error))); return; }
        finish(true, json);
      },
      (error) => {
        if (error === EXIT || finished) return;
        finish(false, stringify(describeError(error)));
      },
    ]);
  }

  return freeze({ configure, prepare, start, settle });
})()`;
