/**
 * A run's journal: everything the host told its VM (the request, every call's answer in the order it was sent, the
 * clock values the VM read) and everything the VM told the host (its calls, output and idle points, in order). With it
 * a run whose VM side was killed or is stuck behind another run's turn can be rebuilt on another VM side: the same
 * request and the same answers, in the same order, give the same calls and output, and none of its tool calls is made
 * again. The replay is checked event by event; one that differs fails the run instead of acting.
 */

import { type CallOutcome, MAX_JOURNAL_CLOCK_READS, type VmEvent } from "../engine/protocol.ts";
import type { CodemodeOutputItem } from "../types.ts";

/**
 * Characters a journal holds at most (call arguments and answers); past it the run can no longer be moved. Past half
 * of it the run gets a VM side to itself.
 */
export const MAX_JOURNAL_CHARS = 8 * 1024 * 1024;

/**
 * Call arguments longer than this are journaled as their length and a digest: the replay only has to know the call
 * is the same one (its answer comes from the journal, the tool is not called again), and a run with a few large
 * arguments stays movable.
 */
export const KEPT_ARGS_CHARS = 4096;

/**
 * What the journal keeps of a call's arguments: the JSON text itself when short, else `#<length>:<digest>` (JSON text
 * never starts with `#`). The digest (two 32-bit multiply-xor lanes over the UTF-16 units) only tells a replay that
 * went another way from one that did not; a hostile script that forged a match would get back its own first answer.
 */
export function argsKey(args: string | undefined): string | undefined {
  if (args === undefined || args.length <= KEPT_ARGS_CHARS) return args;
  let h1 = 0xdeadbeef ^ args.length;
  let h2 = 0x41c6ce57 ^ args.length;
  for (let i = 0; i < args.length; i++) {
    const c = args.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return `#${args.length}:${(h1 >>> 0).toString(16)}${(h2 >>> 0).toString(16)}`;
}

/** What the host saw of the run, in order (clock values aside). */
export type JournalEvent =
  | { type: "started"; restored: boolean }
  | { type: "call"; id: number; target: "tool" | "global"; name: string; args: string | undefined /* argsKey */ }
  | { type: "output"; item: CodemodeOutputItem }
  | { type: "idle"; seq: number; issued: number };

export interface JournalSettle {
  id: number;
  outcome: CallOutcome;
  seq: number | null;
  now: number | null;
}

export class Journal {
  readonly events: JournalEvent[] = [];
  readonly settles: JournalSettle[] = [];
  readonly clock: number[] = [];
  private chars = 0;
  /** Set once the journal could not keep everything (too large, or the VM read the clock too often). */
  lost = false;
  /** Why it was lost, for the error of a run that then could not move. */
  lostBecause = "";

  constructor(private readonly maxChars: number) {}

  /**
   * Whether it holds more than half of what it may (characters or clock values): its run gets a VM side to itself
   * then, while it can still be rebuilt elsewhere (see PeerPool).
   */
  get nearLimits(): boolean {
    return this.chars > this.maxChars / 2 || this.clock.length > MAX_JOURNAL_CLOCK_READS / 2;
  }

  private count(chars: number): void {
    this.chars += chars;
    if (this.chars > this.maxChars) {
      this.drop(
        `its journal passed ${this.maxChars} characters of call arguments and answers (MAX_JOURNAL_CHARS, or its memory limit if lower)`,
      );
    }
  }

  /** Gives up on the journal (`because`, for the error): the run can no longer be moved, and its memory is freed. */
  drop(because: string): void {
    if (!this.lost) this.lostBecause = because;
    this.lost = true;
    this.events.length = 0;
    this.settles.length = 0;
    this.clock.length = 0;
  }

  /** Notes an event the host received and passed on. */
  noteEvent(event: VmEvent): void {
    if (this.lost) return;
    switch (event.type) {
      case "started":
        this.events.push({ type: "started", restored: event.restored });
        break;
      case "call": {
        const args = argsKey(event.args);
        this.events.push({ type: "call", id: event.id, target: event.target, name: event.name, args });
        this.count(64 + (args?.length ?? 0));
        break;
      }
      case "output":
        // The execution keeps the item itself; the journal holds a reference.
        this.events.push({ type: "output", item: event.item });
        this.count(16);
        break;
      case "idle":
        this.events.push({ type: "idle", seq: event.seq, issued: event.issued });
        break;
      case "clock":
        if (event.reads === null)
          this.drop(`it read the clock more than ${MAX_JOURNAL_CLOCK_READS} times (MAX_JOURNAL_CLOCK_READS)`);
        else {
          for (const value of event.reads) this.clock.push(value);
          this.count(8 * event.reads.length);
        }
        break;
      case "snapshot":
      case "done":
        break;
    }
  }

  /** Notes an answer the host sent. */
  noteSettle(settle: JournalSettle): void {
    if (this.lost) return;
    this.settles.push(settle);
    const outcome = settle.outcome;
    this.count(
      64 + (outcome.ok ? (outcome.value?.length ?? 0) : outcome.message.length + (outcome.properties?.length ?? 0)),
    );
  }
}

/** Where a replay is: how much of the journal it has matched. */
export class Replay {
  private at = 0;
  /** Clock values the replay has reported so far (the first ones are the journal's, served back to it). */
  private clockSeen = 0;
  private readonly recordedClock: number;
  private readonly recordedEvents: number;

  constructor(private readonly journal: Journal) {
    this.recordedClock = journal.clock.length;
    this.recordedEvents = journal.events.length;
  }

  /** True once the replay has produced every event the journal holds: what follows is new. */
  get caughtUp(): boolean {
    return this.at >= this.recordedEvents;
  }

  /**
   * Checks an event of the replay against the journal. "replayed": it matches one the host already passed on (drop
   * it); "new": the replay has caught up (pass it on, and journal it); a string: the replay went another way.
   */
  check(event: VmEvent): "replayed" | "new" | string {
    if (event.type === "clock") {
      if (event.reads === null) return "new";
      const recorded = Math.max(0, Math.min(event.reads.length, this.recordedClock - this.clockSeen));
      this.clockSeen += event.reads.length;
      if (recorded === event.reads.length) return "replayed";
      if (recorded === 0) return "new";
      // Part recorded, part new: journal the new part only.
      this.journal.noteEvent({ ...event, reads: event.reads.slice(recorded) });
      return "replayed";
    }
    // A snapshot answers a command the host sent the rebuilt run again: not part of what the run did.
    if (this.caughtUp || event.type === "snapshot") return "new";
    if (event.type === "done") return "it ended before it had made the calls and output of its first attempt";
    const expected = this.journal.events[this.at] as JournalEvent;
    const same = sameEvent(expected, event);
    if (!same) return `it made ${describe(event)} where its first attempt made ${describeJournal(expected)}`;
    this.at++;
    return "replayed";
  }
}

function sameEvent(expected: JournalEvent, event: VmEvent): boolean {
  switch (event.type) {
    case "started":
      return expected.type === "started" && expected.restored === event.restored;
    case "call":
      return (
        expected.type === "call" &&
        expected.id === event.id &&
        expected.target === event.target &&
        expected.name === event.name &&
        expected.args === argsKey(event.args)
      );
    case "output": {
      if (expected.type !== "output") return false;
      const a = expected.item;
      const b = event.item;
      if (a.type === "text" && b.type === "text") return a.text === b.text && a.console === b.console;
      if (a.type === "image" && b.type === "image") return a.data === b.data && a.mimeType === b.mimeType;
      return false;
    }
    case "idle":
      return expected.type === "idle" && expected.seq === event.seq && expected.issued === event.issued;
    default:
      return false;
  }
}

function describe(event: VmEvent): string {
  return event.type === "call" ? `call ${event.id} (${event.name})` : `an ${event.type} event`;
}

function describeJournal(event: JournalEvent): string {
  return event.type === "call" ? `call ${event.id} (${event.name})` : `an ${event.type} event`;
}
