/**
 * The VMs of one runner: booted once from the post-prelude image, handed to runs, reset after each (off the latency
 * path), replaced when their memory grew, and images captured after `configure` for configurations seen again.
 */

import { nudgeGarbageCollection, runSoon } from "../platform/platform.ts";
import { MANY_ZERO_PAGES } from "./image.ts";
import type { ConfigurationContent, HostCommand, RunRequest } from "./protocol.ts";
import { RepeatCache } from "./repeat-cache.ts";
import { snapshotImage, snapshotKey } from "./snapshot.ts";
import { GuestVm, type VmImage, type VmOptions } from "./vm.ts";
import { moduleDigestOf } from "./wasm/module-digest.ts";

/** VMs booted besides the first, so that executions in a row need not wait for a reset. */
const SPARE_VMS = 1;
/** Bytes of the image copied per step of a gradual whole-image reset (about 20-30 us each). */
const RESET_CHUNK_BYTES = 256 * 1024;
/**
 * With whole-image resets (a module without write tracking), a VM that once wrote many of the image's zero pages (a
 * deep recursion, a large allocation) is replaced by a new instance, whose zero pages are cheap to check again (see
 * GuestVm.peakZeroPagesWritten), once its last this many resets found few written: a workload that writes them every
 * time rewrites them anyway and is not renewed each time.
 */
const RENEW_AFTER_QUIET_RESETS = 64;

/** A request with its configuration, parsed. */
export interface Queued {
  request: RunRequest;
  /** The run's deadline on this VM side's clock (ms since the epoch; see RunRequest.timeLeftMs), or null. */
  deadline: number | null;
  configured: ConfigurationContent;
  /**
   * Commands for the run that came while it waited for a VM (a rebuilt run's answers are sent with its request): they
   * are handled, in order, once it began.
   */
  early: HostCommand[];
  /** The image of the run's snapshot it continues from (RunRequest.restore), when this VM side can restore it. */
  restore: VmImage | undefined;
}

export interface VmPoolOwner {
  /** A VM for a request, reset to `image`: the run begins. */
  begin(queued: Queued, vm: GuestVm, image: VmImage): void;
  /** No VM could be made for a request. */
  fail(queued: Queued, message: string): void;
}

export class VmPool {
  /** The post-prelude image every VM is made from. */
  private image!: VmImage;
  /**
   * Images captured after `configure`, by configuration (each keeps a VM's data pages, about 0.5 MiB): executions
   * with the same tools, globals and mode start from a VM already past `configure`, which otherwise costs tens of
   * microseconds per tool.
   */
  private readonly configured = new RepeatCache<VmImage>({ entries: 4, counted: 256 });
  /** Configurations parsed, by key (only `get`/`set` are used: parsing is needed from the first use on). */
  private readonly configurations = new RepeatCache<ConfigurationContent>({ entries: 64, counted: 0 });
  private readonly idle: GuestVm[] = [];
  /** VMs whose execution ended and whose reset is scheduled; taken (and reset at once) when no idle VM is left. */
  private readonly recycling = new Map<GuestVm, Generator<void, boolean>>();
  /** The VM recycled last: its memory is still in the CPU's caches. */
  private lastRecycled: GuestVm | undefined;
  private vmCount = 0;
  private readonly waiting: Queued[] = [];
  private closed = false;

  constructor(
    private readonly options: VmOptions & {
      maxVms: number;
      /** The post-prelude image made beforehand for this module (prebuilt-image.ts), if any: no VM then boots. */
      image?: VmImage;
    },
    private readonly owner: VmPoolOwner,
  ) {}

  /** Makes the first VM from the given image, or boots it and captures the image every later VM is made from. */
  async init(): Promise<void> {
    const given = this.options.image;
    const { vm, image } = given
      ? { vm: await GuestVm.fromImage(this.options, given), image: given }
      : await GuestVm.boot(this.options);
    this.image = image;
    this.snapshotKey = snapshotKey(moduleDigestOf(this.options.module), image);
    if (!vm.reset(image)) throw new Error("a freshly booted VM could not be reset");
    this.idle.push(vm);
    this.vmCount = 1;
    // Spares, so that a clean VM can serve while the last ones used are being reset.
    while (this.vmCount < Math.min(this.options.maxVms, SPARE_VMS + 1)) {
      this.idle.push(await GuestVm.fromImage(this.options, image));
      this.vmCount++;
    }
  }

  /** The key of the snapshots this VM side takes and restores (snapshot.ts); null when it can do neither. */
  snapshotKey: string | null = null;

  get versions(): Record<string, string> {
    return this.image.versions;
  }

  get preludeHash(): string {
    return this.image.preludeHash;
  }

  /** The post-prelude image (a run on it still has to `configure`). */
  get baseImage(): VmImage {
    return this.image;
  }

  /** Whether the pool has work of its own for the thread: requests waiting for a VM, or resets in progress. */
  get idleWork(): boolean {
    return this.waiting.length > 0 || this.recycling.size > 0;
  }

  get waitingCount(): number {
    return this.waiting.length;
  }

  /** Begins a request on an idle VM, or queues it (and adds a VM, up to `maxVms`). */
  start(request: RunRequest): void {
    const restore = request.restore === null ? undefined : snapshotImage(request.restore, this.snapshotKey, this.image);
    const deadline = request.timeLeftMs === null ? null : Date.now() + request.timeLeftMs;
    const queued: Queued = { request, deadline, configured: this.configurationOf(request), early: [], restore };
    const image = this.startImage(queued);
    const vm = this.takeIdle(image);
    if (vm) {
      this.owner.begin(queued, vm, image);
      return;
    }
    this.waiting.push(queued);
    if (this.vmCount < this.options.maxVms) {
      this.vmCount++;
      void this.addVm();
    }
  }

  /** A request that waits for a VM. */
  waitingRun(exec: number): Queued | undefined {
    return this.waiting.find((q) => q.request.exec === exec);
  }

  /** Drops a request that waits for a VM; false if it is not waiting. */
  dropWaiting(exec: number): boolean {
    const index = this.waiting.findIndex((q) => q.request.exec === exec);
    if (index < 0) return false;
    this.waiting.splice(index, 1);
    return true;
  }

  private configurationOf(request: RunRequest): ConfigurationContent {
    const { key, json } = request.configuration;
    let content = this.configurations.get(key);
    if (!content) {
      content = JSON.parse(json) as ConfigurationContent;
      this.configurations.set(key, content);
    }
    return content;
  }

  /** The image a configuration starts from: its own once captured, the post-prelude one until then. */
  imageFor(key: string): VmImage {
    return this.configured.get(key) ?? this.image;
  }

  /** The image a queued run's VM is reset to before it begins: its snapshot's, or its configuration's. */
  private startImage(queued: Queued): VmImage {
    return queued.restore ?? this.imageFor(queued.request.configuration.key);
  }

  /**
   * A VM just configured on the post-prelude image: the second use of its configuration captures its own image,
   * which is returned (the run then resets to it afterwards).
   */
  noteConfigured(key: string, vm: GuestVm): VmImage | undefined {
    if (!this.configured.repeats(key)) return undefined;
    // A configuration that grew the memory stays uncaptured: VMs of both images could not be reset to each other.
    if (vm.memoryBytes() !== this.image.byteLength) return undefined;
    const image = vm.capture();
    this.configured.set(key, image);
    return image;
  }

  /**
   * An idle VM reset to `image`, preferring the one recycled last (its reset finished now), then one in that state
   * already and the most recently used. The VM recycled last is in the CPU's caches: taking idle VMs that waited cold
   * instead made a worker with 8 idle VMs spend ~40% more CPU per trivial execution at 64 in flight.
   */
  private takeIdle(image: VmImage): GuestVm | undefined {
    const hot = this.lastRecycled;
    this.lastRecycled = undefined;
    if (hot && this.recycling.has(hot)) this.finishReset(hot);
    for (const vm of this.recycling.keys()) {
      if (this.idle.length > 0) break;
      this.finishReset(vm);
    }
    while (this.idle.length > 0) {
      let index = this.idle.length - 1;
      for (let i = index; i >= 0; i--) {
        if ((this.idle[i] as GuestVm).currentImage === image) {
          index = i;
          break;
        }
      }
      const vm = this.idle.splice(index, 1)[0] as GuestVm;
      if (vm.reset(image)) return vm;
      // Its memory grew past the image: a new instance replaces it (the VM count stays the same).
      vm.dispose();
      void this.addVm();
    }
    return undefined;
  }

  /** Finishes a recycled VM's reset where it is (rather than copying the whole image again); the VM is then idle. */
  private finishReset(vm: GuestVm): void {
    const steps = this.recycling.get(vm) as Generator<void, boolean>;
    this.recycling.delete(vm);
    let step = steps.next();
    while (!step.done) step = steps.next();
    this.idle.push(vm);
  }

  private async addVm(): Promise<void> {
    let vm: GuestVm;
    try {
      vm = await GuestVm.fromImage(this.options, this.image);
    } catch (error) {
      this.vmCount--;
      const queued = this.waiting.shift();
      if (queued) this.owner.fail(queued, `could not create a VM: ${error instanceof Error ? error.message : error}`);
      return;
    }
    if (this.closed) {
      vm.dispose();
      return;
    }
    this.release(vm);
  }

  private release(vm: GuestVm): void {
    const queued = this.waiting.shift();
    if (queued) {
      const image = this.startImage(queued);
      if (!vm.reset(image)) {
        vm.dispose();
        this.waiting.unshift(queued);
        void this.addVm();
        return;
      }
      this.owner.begin(queued, vm, image);
      return;
    }
    this.idle.push(vm);
  }

  /**
   * Returns a VM after its execution ended. The reset runs after the result went out, so it stays off the latency
   * path: restoring the pages the execution wrote takes one step; a whole-image reset (a module without write
   * tracking) goes in steps that let messages through. A run that needs the VM before then finishes the reset at once.
   */
  recycle(vm: GuestVm, image: VmImage): void {
    if (vm.needsReplacing(image)) {
      // Its memory grew (or it broke): dropped now rather than when next taken, and the garbage collector is asked
      // to return that memory, so that what the guest-memory budget counts is what the host holds.
      vm.dispose();
      nudgeGarbageCollection();
      void this.addVm();
      return;
    }
    if (vm.peakZeroPagesWritten >= MANY_ZERO_PAGES && vm.quietResets >= RENEW_AFTER_QUIET_RESETS) {
      // A new instance replaces it (the VM count stays the same), off the request path.
      vm.dispose();
      void this.addVm();
      return;
    }
    const steps = vm.resetGradually(image, RESET_CHUNK_BYTES);
    this.recycling.set(vm, steps);
    this.lastRecycled = vm;
    const step = () => {
      // Taken by a run meanwhile (and reset at once), or recycled again with a newer reset.
      if (this.recycling.get(vm) !== steps) return;
      if (this.closed) {
        this.recycling.delete(vm);
        vm.dispose();
        return;
      }
      const next = steps.next();
      if (!next.done) {
        runSoon(step);
        return;
      }
      this.recycling.delete(vm);
      if (next.value) {
        this.release(vm);
        return;
      }
      vm.dispose();
      void this.addVm();
    };
    runSoon(step);
  }

  close(): void {
    this.closed = true;
    for (const vm of [...this.idle, ...this.recycling.keys()]) vm.dispose();
    this.idle.length = 0;
    this.recycling.clear();
  }
}
