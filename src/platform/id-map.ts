/**
 * A map from integer ids (runs, VM slots, executions) to values, for the tables that gain and lose an entry per
 * execution for as long as the process runs.
 *
 * Why not a `Map`: in V8 before 12 (Node 20 and 22), a `Map` or `Set` that keeps gaining and losing entries rehashes
 * into a new table every few dozen changes, and the old table keeps a link to the new one and its entries. Once one of
 * those tables has been promoted to the old generation, every table after it, and every value in them, survives the
 * young generation's collections and is promoted too, until the next full collection promotes the live table again.
 * At 64 executions in flight that was 3-5 MB promoted per scavenge, scavenges of 7 ms against 1 and a full collection
 * every 0.3 s, in about half of the processes (`--trace-gc-nvp`). This table is two arrays that are only replaced when
 * it grows: nothing links an old generation of it to a new one, and a removed value is cleared from its slot.
 * An object with integer keys has no such link either, but its lookups cost about five times a `Map`'s; these cost
 * less than a `Map`'s.
 *
 * Open addressing with linear probing and backward-shift removal (no tombstones). Iteration is in ascending id order
 * (a `Map` iterates in insertion order: the same for ids that only grow) over the entries present when it began; one
 * removed meanwhile is skipped, one added meanwhile is not visited.
 */
const EMPTY = -1;
const MIN_BITS = 3;

export class IdMap<V> {
  private bits = MIN_BITS;
  private ids: number[] = new Array<number>(1 << MIN_BITS).fill(EMPTY);
  private vals: (V | undefined)[] = new Array<V | undefined>(1 << MIN_BITS).fill(undefined);
  private count = 0;

  get size(): number {
    return this.count;
  }

  get(id: number): V | undefined {
    const keys = this.ids;
    const mask = keys.length - 1;
    for (let i = this.home(id); ; i = (i + 1) & mask) {
      const key = keys[i];
      if (key === id) return this.vals[i];
      if (key === EMPTY) return undefined;
    }
  }

  has(id: number): boolean {
    return this.get(id) !== undefined;
  }

  /** `id` is a non-negative safe integer; `value` is not undefined (it would read as absent). */
  set(id: number, value: V): this {
    if (!Number.isSafeInteger(id) || id < 0)
      throw new RangeError(`IdMap: an id must be a non-negative integer, got ${id}`);
    const keys = this.ids;
    const mask = keys.length - 1;
    for (let i = this.home(id); ; i = (i + 1) & mask) {
      const key = keys[i];
      if (key === id) {
        this.vals[i] = value;
        return this;
      }
      if (key === EMPTY) {
        keys[i] = id;
        this.vals[i] = value;
        this.count++;
        // At most half full, so that probes stay short.
        if (this.count * 2 > keys.length) this.resize(this.bits + 1);
        return this;
      }
    }
  }

  delete(id: number): boolean {
    const keys = this.ids;
    const vals = this.vals;
    const mask = keys.length - 1;
    let i = this.home(id);
    for (; ; i = (i + 1) & mask) {
      const key = keys[i];
      if (key === id) break;
      if (key === EMPTY) return false;
    }
    // Backward shift: an entry after the gap whose home is not cyclically in (gap, its slot] moves into the gap.
    for (let j = (i + 1) & mask; keys[j] !== EMPTY; j = (j + 1) & mask) {
      const home = this.home(keys[j] as number);
      const stays = i <= j ? i < home && home <= j : i < home || home <= j;
      if (stays) continue;
      keys[i] = keys[j] as number;
      vals[i] = vals[j];
      i = j;
    }
    keys[i] = EMPTY;
    vals[i] = undefined;
    this.count--;
    // Back down after a burst, a quarter full at most.
    if (this.bits > MIN_BITS && this.count * 8 < keys.length) this.resize(this.bits - 1);
    return true;
  }

  *values(): IterableIterator<V> {
    for (const [, value] of this) yield value;
  }

  *[Symbol.iterator](): IterableIterator<[number, V]> {
    const ids: number[] = [];
    for (const key of this.ids) if (key !== EMPTY) ids.push(key);
    ids.sort((a, b) => a - b);
    for (const id of ids) {
      const value = this.get(id);
      if (value !== undefined) yield [id, value];
    }
  }

  /** Fibonacci hashing: consecutive ids spread over the table. */
  private home(id: number): number {
    return Math.imul(id, 0x9e3779b1) >>> (32 - this.bits);
  }

  private resize(bits: number): void {
    const keys = this.ids;
    const vals = this.vals;
    this.bits = bits;
    this.ids = new Array<number>(1 << bits).fill(EMPTY);
    this.vals = new Array<V | undefined>(1 << bits).fill(undefined);
    this.count = 0;
    for (let i = 0; i < keys.length; i++) {
      if (keys[i] !== EMPTY) this.set(keys[i] as number, vals[i] as V);
    }
  }
}
