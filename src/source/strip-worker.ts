/**
 * Entry of the thread that strips TypeScript types (typescript-thread.ts): one script at a time, answered with the
 * JavaScript or the script's error. amaro runs here, so that its time and memory are not the host thread's.
 */
import { isMainThread, parentPort } from "node:worker_threads";
import { CodemodeSourceError } from "./source-error.ts";
import { stripTypeScript } from "./typescript.ts";

/** What the thread answers for one script. */
export type StripAnswer =
  | { ok: true; code: string }
  | { ok: false; rule: CodemodeSourceError["rule"]; message: string; line?: number; column?: number }
  | { ok: false; failed: string };

if (!isMainThread && parentPort) {
  const port = parentPort;
  // amaro is loaded before the first script's deadline starts (where it cannot be, each script says why).
  try {
    stripTypeScript("");
  } catch {}
  port.on("message", (code: unknown) => {
    let answer: StripAnswer;
    try {
      answer = { ok: true, code: stripTypeScript(code as string) };
    } catch (error) {
      answer =
        error instanceof CodemodeSourceError
          ? {
              ok: false,
              rule: error.rule,
              message: error.message,
              ...(error.line === undefined ? {} : { line: error.line }),
              ...(error.column === undefined ? {} : { column: error.column }),
            }
          : { ok: false, failed: error instanceof Error ? error.message : String(error) };
    }
    port.postMessage(answer);
  });
  port.postMessage({ ready: true });
}
