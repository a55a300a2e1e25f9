/**
 * Tools for the examples. `airlock run --tools <module>` imports a module like this one: its default export is an
 * array of tools, each `{ name, description?, inputSchema?, outputSchema?, execute(args, { signal }) }`.
 *
 *   npx airlock run examples/hello.js --tools examples/tools.mjs
 */
import { readFile } from "node:fs/promises";
import { dirname, isAbsolute, relative, resolve, sep } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

/** Canned weather, so that the examples give the same answer everywhere. */
const weather = {
  lisbon: { city: "Lisbon", tempC: 21, conditions: "sunny" },
  oslo: { city: "Oslo", tempC: 3, conditions: "snow showers" },
  nairobi: { city: "Nairobi", tempC: 24, conditions: "partly cloudy" },
};

export default [
  {
    name: "add",
    description: "Add two numbers.",
    inputSchema: {
      type: "object",
      properties: { a: { type: "number" }, b: { type: "number" } },
      required: ["a", "b"],
    },
    outputSchema: { type: "number" },
    execute({ a, b } = {}) {
      if (typeof a !== "number" || typeof b !== "number") throw new TypeError("add: a and b must be numbers");
      return a + b;
    },
  },
  {
    name: "weather",
    description: "Current weather in a city: Lisbon, Oslo or Nairobi.",
    inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    outputSchema: {
      type: "object",
      properties: { city: { type: "string" }, tempC: { type: "number" }, conditions: { type: "string" } },
    },
    execute({ city } = {}) {
      const found = weather[String(city).toLowerCase()];
      if (!found) throw new Error(`weather: no data for "${city}"; try Lisbon, Oslo or Nairobi`);
      return found;
    },
  },
  {
    name: "read_file",
    description: "Read a UTF-8 text file from the examples folder, for example note.txt.",
    inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
    outputSchema: { type: "string" },
    async execute({ path } = {}, { signal }) {
      const full = resolve(here, String(path));
      const inside = relative(here, full);
      if (inside === "" || inside === ".." || inside.startsWith(`..${sep}`) || isAbsolute(inside)) {
        throw new Error(`read_file: ${path} is not a file in the examples folder`);
      }
      return readFile(full, { encoding: "utf8", signal });
    },
  },
  {
    name: "slow",
    description: "Wait `ms` milliseconds (default 1000), then resolve. Stops early when the run ends.",
    inputSchema: { type: "object", properties: { ms: { type: "number" } } },
    outputSchema: { type: "object", properties: { waitedMs: { type: "number" } } },
    async execute({ ms = 1000 } = {}, { signal }) {
      await sleep(ms, undefined, { signal });
      return { waitedMs: ms };
    },
  },
];
