/**
 * A budget of cost (in micros) and calls, shared by every call that names it. A call reserves its tool's cost before
 * the tool runs and settles the reservation after: spent (the tool answered), released (it never ran) or unknown (it
 * ran and nobody knows how it ended; that cost stays held). Zero means zero, never unlimited.
 */
import { checkInteger } from "../platform/options.ts";
import { MAX_COST_MICROS } from "./define.ts";
import { CONFIG_OPTION_ERRORS, configError } from "./errors.ts";

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
  /**
   * The tool ran and its cost is known only now: `spentMicros` is spent, `unknownMicros` stays held as unknown and
   * the rest is given back (the call still counts). Together they are at most `costMicros`.
   */
  settle(spentMicros: number, unknownMicros: number): void;
}

/** A non-negative safe integer: an amount of micros or calls. */
export const isCount = (value: unknown): value is number =>
  typeof value === "number" && Number.isSafeInteger(value) && value >= 0;

export class Budget {
  readonly maxCostMicros: number;
  readonly maxCalls: number;
  #calls = 0;
  #spent = 0;
  #reserved = 0;
  #unknown = 0;

  constructor(maxCostMicros: number, maxCalls: number) {
    checkInteger(maxCostMicros, "Budget maxCostMicros", 0, MAX_COST_MICROS, CONFIG_OPTION_ERRORS);
    checkInteger(maxCalls, "Budget maxCalls", 0, MAX_BUDGET_CALLS, CONFIG_OPTION_ERRORS);
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
    const settle = (spent: number, unknown: number, ran: boolean) => {
      if (settled) return;
      settled = true;
      this.#reserved -= costMicros;
      this.#spent += spent;
      this.#unknown += unknown;
      if (!ran) this.#calls -= 1;
    };
    return Object.freeze({
      costMicros,
      commit: () => settle(costMicros, 0, true),
      release: () => settle(0, 0, false),
      markUnknown: () => settle(0, costMicros, true),
      settle: (spentMicros: number, unknownMicros: number) => {
        if (!isCount(spentMicros) || !isCount(unknownMicros) || spentMicros + unknownMicros > costMicros) {
          throw configError("a reservation settles to non-negative integers of at most its costMicros together");
        }
        settle(spentMicros, unknownMicros, true);
      },
    });
  }
}
