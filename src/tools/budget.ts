/**
 * A budget of cost (in micros) and calls, shared by every call that names it. A call reserves its tool's cost before
 * the tool runs and settles the reservation after: spent (the tool answered), released (it never ran) or unknown (it
 * ran and nobody knows how it ended; that cost stays held). Zero means zero, never unlimited.
 */
import { MAX_COST_MICROS } from "./define.ts";
import { configError } from "./errors.ts";

/** Largest `maxCalls` of a budget. */
export const MAX_BUDGET_CALLS = Number.MAX_SAFE_INTEGER;

export interface BudgetReservation {
  readonly costMicros: number;
  /** The tool ran and answered: the cost is spent. */
  commit(): void;
  /** The tool never ran: the cost and the call are given back. */
  release(): void;
  /** The tool ran but its outcome is unknown: the cost stays held as unknown. */
  markUnknown(): void;
}

export class Budget {
  readonly maxCostMicros: number;
  readonly maxCalls: number;
  #calls = 0;
  #spent = 0;
  #reserved = 0;
  #unknown = 0;

  constructor(maxCostMicros: number, maxCalls: number) {
    if (typeof maxCostMicros !== "number" || !Number.isSafeInteger(maxCostMicros) || maxCostMicros < 0) {
      throw configError(`Budget maxCostMicros must be an integer from 0 to ${MAX_COST_MICROS}`);
    }
    if (typeof maxCalls !== "number" || !Number.isSafeInteger(maxCalls) || maxCalls < 0) {
      throw configError(`Budget maxCalls must be an integer from 0 to ${MAX_BUDGET_CALLS}`);
    }
    this.maxCostMicros = maxCostMicros;
    this.maxCalls = maxCalls;
    Object.freeze(this);
  }

  /** Calls reserved so far, released ones excluded. */
  get calls(): number {
    return this.#calls;
  }
  get spentMicros(): number {
    return this.#spent;
  }
  get reservedMicros(): number {
    return this.#reserved;
  }
  get unknownMicros(): number {
    return this.#unknown;
  }
  get remainingMicros(): number {
    return this.maxCostMicros - this.#spent - this.#reserved - this.#unknown;
  }

  /** Reserves one call of `costMicros`, or returns `undefined` when the calls or the cost would pass the budget. */
  reserve(costMicros: number): BudgetReservation | undefined {
    if (typeof costMicros !== "number" || !Number.isSafeInteger(costMicros) || costMicros < 0) {
      throw configError("a reservation's costMicros must be a non-negative integer");
    }
    if (this.#calls + 1 > this.maxCalls || costMicros > this.remainingMicros) return undefined;
    this.#calls += 1;
    this.#reserved += costMicros;
    let settled = false;
    const settle = (how: "commit" | "release" | "unknown") => {
      if (settled) return;
      settled = true;
      this.#reserved -= costMicros;
      if (how === "commit") this.#spent += costMicros;
      else if (how === "unknown") this.#unknown += costMicros;
      else this.#calls -= 1;
    };
    return Object.freeze({
      costMicros,
      commit: () => settle("commit"),
      release: () => settle("release"),
      markUnknown: () => settle("unknown"),
    });
  }
}
