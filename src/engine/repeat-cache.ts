/**
 * Values a runner derives for keys it sees again (the image of a configuration, the bytecode of a script). A key's
 * value is derived on its second use, so one-off keys never pay for it; values past the limits go least recently used
 * first.
 */
export interface RepeatCacheLimits<V> {
  /** Values kept. */
  entries: number;
  /** Keys seen once that are remembered; past it the counts start over. */
  counted: number;
  /** Total size of the values kept, measured by `sizeOf`. */
  maxSize?: number;
  sizeOf?: (value: V) => number;
}

export class RepeatCache<V> {
  private readonly values = new Map<string, V>();
  private readonly seenOnce = new Set<string>();
  private size = 0;

  constructor(private readonly limits: RepeatCacheLimits<V>) {}

  /** The value of `key`, if kept (it becomes the most recently used). */
  get(key: string): V | undefined {
    const value = this.values.get(key);
    if (value !== undefined) {
      this.values.delete(key);
      this.values.set(key, value);
    }
    return value;
  }

  /** Records a use of `key`, which has no value yet: true from its second use on, when the caller should `set` one. */
  repeats(key: string): boolean {
    if (this.seenOnce.delete(key)) return true;
    if (this.seenOnce.size >= this.limits.counted) this.seenOnce.clear();
    this.seenOnce.add(key);
    return false;
  }

  set(key: string, value: V): void {
    const { entries, maxSize = Number.POSITIVE_INFINITY, sizeOf = () => 0 } = this.limits;
    if (sizeOf(value) > maxSize) return;
    this.values.set(key, value);
    this.size += sizeOf(value);
    for (const [oldest, old] of this.values) {
      if (this.values.size <= entries && this.size <= maxSize) break;
      this.values.delete(oldest);
      this.size -= sizeOf(old);
    }
  }
}
