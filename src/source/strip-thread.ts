/**
 * TypeScript stripped on a thread of its own, under a deadline: what `execute()` and `start()` of a sandbox with
 * `typescript: true`, the MCP gateway and the AI SDK tool use. amaro (source/typescript.ts) has no deadline, and some
 * scripts take it super-linear time (a run of 3,200 `-` signs takes 0.4 s, of 6,400 about four times that), so on
 * the caller's thread one program could hold every other client's requests. Here a script that is not stripped in
 * time has its thread terminated and fails alone with a script error; the scripts queued behind it go to a new
 * thread. One thread strips one script at a time, in order of arrival; it is started on the first script (amaro
 * loaded before its first deadline starts) and kept, without keeping the process alive while idle.
 */
import { nodeBuiltin } from "../platform/platform.ts";
import { startWorker } from "../platform/start-worker.ts";
import { CodemodeSourceError } from "./source-error.ts";
import type { StripAnswer } from "./strip-worker.ts";
import { refuseLongTypeScript, stripTypeScript } from "./typescript.ts";

/**
 * Deadline of stripping one script's types on the strip thread. A 1 MiB script (`MAX_TYPESCRIPT_CHARS`) takes
 * 0.5-1.3 s on a loaded 2-core machine, a model's few-KiB program under 10 ms.
 */
export const TYPESCRIPT_STRIP_TIMEOUT_MS = 5_000;

/** The strip thread could not start (its file is missing, or the runtime refused the thread): not the script's fault. */
export class StripThreadError extends Error {
  override readonly name = "StripThreadError";
}

interface StripWorker {
  postMessage(value: unknown): void;
  on(event: "message" | "error" | "exit", listener: (value: unknown) => void): void;
  terminate(): Promise<number>;
  ref(): void;
  unref(): void;
}
type WorkerClass = new (url: string | URL, options: object) => StripWorker;

interface Job {
  code: string;
  resolve(code: string): void;
  reject(error: unknown): void;
}

interface Thread {
  worker: StripWorker;
  /** The thread posted that it is ready: amaro is loaded. */
  ready: boolean;
  /** The job the thread strips now, and its deadline's timer. */
  job: Job | undefined;
  timer: ReturnType<typeof setTimeout> | undefined;
}

const queue: Job[] = [];
let thread: Thread | undefined;

/**
 * The script with its types erased, as `stripTypeScript` gives it, stripped on the strip thread within
 * `TYPESCRIPT_STRIP_TIMEOUT_MS`. Rejects with `CodemodeSourceError` for a script that is not TypeScript that can be
 * erased, is too long or too deep, or is not stripped in time (rule `typescript-limit`); with `StripThreadError`
 * when the thread cannot start. Where the runtime has no threads (Workers), strips on the calling thread.
 */
export function stripTypeScriptOnThread(code: string): Promise<string> {
  const threads = nodeBuiltin<{ Worker: WorkerClass }>("worker_threads");
  if (threads === undefined) return Promise.resolve().then(() => stripTypeScript(code));
  try {
    refuseLongTypeScript(code);
  } catch (error) {
    return Promise.reject(error);
  }
  return new Promise((resolve, reject) => {
    queue.push({ code, resolve, reject });
    next(threads.Worker);
  });
}

/** Hands the next queued script to the thread, starting one if there is none. */
function next(Worker: WorkerClass): void {
  if (thread?.job !== undefined) return;
  if (queue.length === 0) {
    thread?.worker.unref();
    return;
  }
  thread ??= open(Worker);
  thread.worker.ref();
  if (!thread.ready) return;
  const current = thread;
  const job = queue.shift() as Job;
  current.job = job;
  current.timer = setTimeout(
    () =>
      replace(
        current,
        Worker,
        new CodemodeSourceError(
          "typescript-limit",
          `The TypeScript script's types were not stripped within ${TYPESCRIPT_STRIP_TIMEOUT_MS} ms. Write a shorter or simpler program, or plain JavaScript.`,
        ),
      ),
    TYPESCRIPT_STRIP_TIMEOUT_MS,
  );
  current.worker.postMessage(job.code);
}

function open(Worker: WorkerClass): Thread {
  const worker = startWorker(Worker, new URL("./strip-worker.js", import.meta.url), {});
  const opened: Thread = { worker, ready: false, job: undefined, timer: undefined };
  worker.on("message", (value) => {
    if (thread !== opened) return;
    const answer = value as StripAnswer | { ready: true };
    if ("ready" in answer) {
      opened.ready = true;
    } else {
      const job = opened.job;
      clearTimeout(opened.timer);
      opened.job = undefined;
      if (answer.ok) job?.resolve(answer.code);
      else if ("failed" in answer) job?.reject(new Error(answer.failed));
      else {
        const position = answer.line === undefined ? undefined : { line: answer.line, column: answer.column };
        job?.reject(new CodemodeSourceError(answer.rule, answer.message, position));
      }
    }
    next(Worker);
  });
  const lost = (reason: unknown) => {
    if (thread !== opened) return;
    if (opened.ready) {
      replace(
        opened,
        Worker,
        new CodemodeSourceError(
          "typescript-limit",
          "The TypeScript script's types could not be stripped: the thread that strips them ran out of its resources. Write a shorter or simpler program, or plain JavaScript.",
        ),
      );
      return;
    }
    // A thread that never got ready fails every script waiting for it; the next script tries a new thread.
    thread = undefined;
    const message = reason instanceof Error ? reason.message : `exit code ${String(reason)}`;
    for (const job of queue.splice(0)) {
      job.reject(new StripThreadError(`The thread that strips TypeScript types did not start: ${message}`));
    }
  };
  worker.on("error", lost);
  worker.on("exit", lost);
  return opened;
}

/** Terminates `failed`, rejects its script with `error`, and hands the queue to a new thread. */
function replace(failed: Thread, Worker: WorkerClass, error: CodemodeSourceError): void {
  if (thread === failed) thread = undefined;
  clearTimeout(failed.timer);
  const job = failed.job;
  failed.job = undefined;
  void failed.worker.terminate();
  job?.reject(error);
  next(Worker);
}
