/** Resident memory of this process and every process under it (child processes, gVisor's sandbox), from Linux's /proc. */
import { readdirSync, readFileSync } from "node:fs";

/** Resident bytes of this process and all its descendants. */
export function treeRssBytes(): number {
  const parents = new Map<number, number>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      // The command name may hold spaces and parentheses: the fields after its last ")" are fixed.
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      parents.set(Number(entry), ppid);
    } catch {
      // Gone meanwhile.
    }
  }
  const inTree = (pid: number): boolean => {
    for (let p: number | undefined = pid, hops = 0; p !== undefined && p > 1 && hops < 64; hops++) {
      if (p === process.pid) return true;
      p = parents.get(p);
    }
    return false;
  };
  let total = 0;
  for (const pid of parents.keys()) {
    if (!inTree(pid)) continue;
    try {
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      const kb = /VmRSS:\s+(\d+) kB/.exec(status)?.[1];
      if (kb) total += Number(kb) * 1024;
    } catch {
      // Gone meanwhile.
    }
  }
  return total;
}

/** Samples treeRssBytes every `everyMs` until `stop()`, which returns the highest value seen. */
export function samplePeakRss(everyMs = 10): { stop(): number } {
  let peak = treeRssBytes();
  const timer = setInterval(() => {
    peak = Math.max(peak, treeRssBytes());
  }, everyMs);
  return {
    stop() {
      clearInterval(timer);
      return Math.max(peak, treeRssBytes());
    },
  };
}
