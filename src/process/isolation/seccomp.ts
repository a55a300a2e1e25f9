/**
 * Seccomp filters for the sandboxed children, generated as classic BPF programs (no compiler at run time) for
 * x86-64 and arm64. Two filters stack:
 *
 * - the base filter, handed to bubblewrap with `--seccomp FD`: no sockets (the channel to the host is inherited, so
 *   no socket is ever created), no ptrace or cross-process memory access, no mount or namespace syscalls (unshare,
 *   setns, clone with namespace flags; clone3 answers ENOSYS so that libc falls back to clone, whose flags a filter
 *   can read), no keyrings, BPF, perf, io_uring, module, kexec, reboot, swap, clock or hostname changes;
 * - the exec filter, loaded by the launch helper (see helper.ts) after it set the rlimits and right before it starts
 *   node: execve is allowed only with a 192-bit secret in three argument registers execve itself ignores, which
 *   only the helper's final execve carries; execveat and every attempt to raise an rlimit are refused.
 *
 * A syscall of another architecture (i386 through int 0x80, the x32 ABI) never gets past the architecture check.
 */

export type SeccompArch = "x86_64" | "aarch64";

/** One sock_filter instruction. */
export interface BpfInstruction {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

export const AUDIT_ARCH: Record<SeccompArch, number> = { x86_64: 0xc000003e, aarch64: 0xc00000b7 };

export const SECCOMP_RET_KILL_PROCESS = 0x80000000;
export const SECCOMP_RET_ERRNO = 0x00050000;
export const SECCOMP_RET_ALLOW = 0x7fff0000;
export const EPERM = 1;
export const ENOSYS = 38;

// BPF opcodes used here.
const LD_W_ABS = 0x20;
const JEQ_K = 0x15;
const JGE_K = 0x35;
const JSET_K = 0x45;
const RET_K = 0x06;

/** Offsets in struct seccomp_data. */
const OFFSET_NR = 0;
const OFFSET_ARCH = 4;
const argLow = (i: number) => 16 + 8 * i;
const argHigh = (i: number) => 16 + 8 * i + 4;

/** CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET. */
export const CLONE_NAMESPACE_FLAGS =
  0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000;
/** Bit the kernel sets in x32 syscall numbers on x86-64. */
const X32_SYSCALL_BIT = 0x40000000;

/** Syscall numbers per architecture (x86-64 from unistd_64.h; arm64 from asm-generic/unistd.h). */
export const SYSCALLS: Record<SeccompArch, Record<string, number>> = {
  x86_64: {
    read: 0,
    close: 3,
    socket: 41,
    socketpair: 53,
    clone: 56,
    execve: 59,
    ptrace: 101,
    syslog: 103,
    uselib: 134,
    personality: 135,
    pivot_root: 155,
    _sysctl: 156,
    prctl: 157,
    adjtimex: 159,
    setrlimit: 160,
    chroot: 161,
    acct: 163,
    settimeofday: 164,
    mount: 165,
    umount2: 166,
    swapon: 167,
    swapoff: 168,
    reboot: 169,
    sethostname: 170,
    setdomainname: 171,
    iopl: 172,
    ioperm: 173,
    init_module: 175,
    delete_module: 176,
    quotactl: 179,
    lookup_dcookie: 212,
    clock_settime: 227,
    exit_group: 231,
    kexec_load: 246,
    add_key: 248,
    request_key: 249,
    keyctl: 250,
    unshare: 272,
    perf_event_open: 298,
    fanotify_init: 300,
    prlimit64: 302,
    name_to_handle_at: 303,
    open_by_handle_at: 304,
    clock_adjtime: 305,
    setns: 308,
    process_vm_readv: 310,
    process_vm_writev: 311,
    kcmp: 312,
    finit_module: 313,
    seccomp: 317,
    kexec_file_load: 320,
    bpf: 321,
    execveat: 322,
    userfaultfd: 323,
    io_uring_setup: 425,
    io_uring_enter: 426,
    io_uring_register: 427,
    open_tree: 428,
    move_mount: 429,
    fsopen: 430,
    fsconfig: 431,
    fsmount: 432,
    fspick: 433,
    clone3: 435,
    mount_setattr: 442,
    quotactl_fd: 443,
  },
  aarch64: {
    read: 63,
    close: 57,
    socket: 198,
    socketpair: 199,
    clone: 220,
    execve: 221,
    ptrace: 117,
    syslog: 116,
    personality: 92,
    pivot_root: 41,
    prctl: 167,
    adjtimex: 171,
    setrlimit: 164,
    chroot: 51,
    acct: 89,
    settimeofday: 170,
    mount: 40,
    umount2: 39,
    swapon: 224,
    swapoff: 225,
    reboot: 142,
    sethostname: 161,
    setdomainname: 162,
    init_module: 105,
    delete_module: 106,
    quotactl: 60,
    lookup_dcookie: 18,
    clock_settime: 112,
    exit_group: 94,
    kexec_load: 104,
    add_key: 217,
    request_key: 218,
    keyctl: 219,
    unshare: 97,
    perf_event_open: 241,
    fanotify_init: 262,
    prlimit64: 261,
    name_to_handle_at: 264,
    open_by_handle_at: 265,
    clock_adjtime: 266,
    setns: 268,
    process_vm_readv: 270,
    process_vm_writev: 271,
    kcmp: 272,
    finit_module: 273,
    seccomp: 277,
    kexec_file_load: 294,
    bpf: 280,
    execveat: 281,
    userfaultfd: 282,
    io_uring_setup: 425,
    io_uring_enter: 426,
    io_uring_register: 427,
    open_tree: 428,
    move_mount: 429,
    fsopen: 430,
    fsconfig: 431,
    fsmount: 432,
    fspick: 433,
    clone3: 435,
    mount_setattr: 442,
    quotactl_fd: 443,
  },
};

/** Syscalls the base filter refuses with EPERM (where the architecture has them). */
export const DENIED_SYSCALLS = [
  // network: the only socket a child has is the inherited channel
  "socket",
  "socketpair",
  // other processes
  "ptrace",
  "process_vm_readv",
  "process_vm_writev",
  "kcmp",
  // mounts and namespaces
  "mount",
  "umount2",
  "pivot_root",
  "chroot",
  "unshare",
  "setns",
  "open_tree",
  "move_mount",
  "fsopen",
  "fsconfig",
  "fsmount",
  "fspick",
  "mount_setattr",
  "name_to_handle_at",
  "open_by_handle_at",
  // keyrings
  "add_key",
  "request_key",
  "keyctl",
  // kernel attack surface the worker never needs
  "bpf",
  "perf_event_open",
  "userfaultfd",
  "fanotify_init",
  "lookup_dcookie",
  "personality",
  "uselib",
  "syslog",
  "_sysctl",
  "init_module",
  "finit_module",
  "delete_module",
  "kexec_load",
  "kexec_file_load",
  "reboot",
  "swapon",
  "swapoff",
  "acct",
  "quotactl",
  "quotactl_fd",
  "iopl",
  "ioperm",
  "settimeofday",
  "clock_settime",
  "adjtimex",
  "clock_adjtime",
  "sethostname",
  "setdomainname",
] as const;

/** Syscalls answered with ENOSYS, so that libraries fall back to a path the filter can inspect or to plain IO. */
export const ENOSYS_SYSCALLS = ["clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"] as const;

/** The architecture of this process, or undefined where no filter is defined. */
export function currentSeccompArch(): SeccompArch | undefined {
  if (process.arch === "x64") return "x86_64";
  if (process.arch === "arm64") return "aarch64";
  return undefined;
}

const ret = (k: number): BpfInstruction => ({ code: RET_K, jt: 0, jf: 0, k: k >>> 0 });
const ld = (offset: number): BpfInstruction => ({ code: LD_W_ABS, jt: 0, jf: 0, k: offset });
const jeq = (k: number, jt: number, jf: number): BpfInstruction => ({ code: JEQ_K, jt, jf, k: k >>> 0 });
const errno = (e: number) => (SECCOMP_RET_ERRNO | e) >>> 0;

/** Loads the arch and refuses any other ABI; leaves the syscall number in A. */
function prologue(arch: SeccompArch): BpfInstruction[] {
  const out = [ld(OFFSET_ARCH), jeq(AUDIT_ARCH[arch], 1, 0), ret(SECCOMP_RET_KILL_PROCESS), ld(OFFSET_NR)];
  if (arch === "x86_64") {
    out.push({ code: JGE_K, jt: 0, jf: 1, k: X32_SYSCALL_BIT }, ret(errno(EPERM)));
  }
  return out;
}

/** `if (nr == n) { body }`, where body ends in a return; A holds the number again after a miss. */
function when(nr: number, body: BpfInstruction[]): BpfInstruction[] {
  if (body.length > 255) throw new RangeError("a BPF block is too long for a conditional jump");
  return [jeq(nr, 0, body.length), ...body];
}

/** The base filter (for bubblewrap's `--seccomp`). */
export function baseFilter(arch: SeccompArch): BpfInstruction[] {
  return [...prologue(arch), ...baseRules(arch), ret(SECCOMP_RET_ALLOW)];
}

/** The base filter's rules, after the prologue; A holds the syscall number. */
function baseRules(arch: SeccompArch): BpfInstruction[] {
  const table = SYSCALLS[arch];
  const out: BpfInstruction[] = [];
  for (const name of DENIED_SYSCALLS) {
    const nr = table[name];
    if (nr !== undefined) out.push(...when(nr, [ret(errno(EPERM))]));
  }
  for (const name of ENOSYS_SYSCALLS) out.push(...when(table[name] as number, [ret(errno(ENOSYS))]));
  // clone: threads and plain forks pass (the process rlimit bounds them); namespace flags do not. Flags are arg 0 on
  // both architectures, and all namespace flags live in its low 32 bits.
  out.push(
    ...when(table.clone as number, [
      ld(argLow(0)),
      { code: JSET_K, jt: 0, jf: 1, k: CLONE_NAMESPACE_FLAGS },
      ret(errno(EPERM)),
      ret(SECCOMP_RET_ALLOW),
    ]),
  );
  return out;
}

/**
 * The exec filter (loaded by the launch helper). `secret` is six 32-bit words: the low and high halves of the 4th,
 * 5th and 6th syscall arguments that the helper's own execve carries. With `withBase`, the base filter's rules come
 * first (for runtimes that take no filter from outside, such as gVisor).
 */
export function execFilter(arch: SeccompArch, secret: readonly number[], withBase = false): BpfInstruction[] {
  if (secret.length !== 6 || secret.some((w) => !Number.isInteger(w) || w < 0 || w > 0xffffffff)) {
    throw new RangeError("the exec secret must be six 32-bit words");
  }
  const table = SYSCALLS[arch];
  const out = prologue(arch);
  if (withBase) out.push(...baseRules(arch));
  // execve: each word compared in turn; any mismatch jumps to the EPERM at the end of the block.
  const checks: BpfInstruction[] = [];
  const offsets = [argLow(3), argHigh(3), argLow(4), argHigh(4), argLow(5), argHigh(5)];
  offsets.forEach((offset, i) => {
    const remaining = (5 - i) * 2; // instructions of the later checks
    checks.push(ld(offset), jeq(secret[i] as number, 0, remaining + 1));
  });
  out.push(...when(table.execve as number, [...checks, ret(SECCOMP_RET_ALLOW), ret(errno(EPERM))]));
  out.push(...when(table.execveat as number, [ret(errno(EPERM))]));
  out.push(...when(table.setrlimit as number, [ret(errno(EPERM))]));
  // prlimit64(pid, resource, new, old): reading is fine, setting (new != NULL) is not.
  out.push(
    ...when(table.prlimit64 as number, [
      ld(argLow(2)),
      jeq(0, 0, 3),
      ld(argHigh(2)),
      jeq(0, 0, 1),
      ret(SECCOMP_RET_ALLOW),
      ret(errno(EPERM)),
    ]),
  );
  out.push(ret(SECCOMP_RET_ALLOW));
  return out;
}

/** struct sock_filter[] as bytes in this machine's order (little-endian on both supported architectures). */
export function encodeFilter(program: readonly BpfInstruction[]): Buffer {
  const out = Buffer.alloc(program.length * 8);
  program.forEach((ins, i) => {
    out.writeUInt16LE(ins.code, i * 8);
    out.writeUInt8(ins.jt, i * 8 + 2);
    out.writeUInt8(ins.jf, i * 8 + 3);
    out.writeUInt32LE(ins.k >>> 0, i * 8 + 4);
  });
  return out;
}

export function decodeFilter(bytes: Buffer): BpfInstruction[] {
  if (bytes.length % 8 !== 0) throw new RangeError("a BPF program is a multiple of 8 bytes");
  const out: BpfInstruction[] = [];
  for (let i = 0; i < bytes.length; i += 8) {
    out.push({
      code: bytes.readUInt16LE(i),
      jt: bytes.readUInt8(i + 2),
      jf: bytes.readUInt8(i + 3),
      k: bytes.readUInt32LE(i + 4),
    });
  }
  return out;
}

/**
 * Checks what the kernel's verifier checks for the subset used here, and a little more: known opcodes, aligned loads
 * inside seccomp_data, every jump inside the program, a return at the end, and the architecture checked first.
 */
export function validateFilter(program: readonly BpfInstruction[], arch: SeccompArch): void {
  if (program.length === 0 || program.length > 4096) throw new RangeError("a BPF program has 1 to 4096 instructions");
  program.forEach((ins, pc) => {
    switch (ins.code) {
      case LD_W_ABS:
        if (ins.k % 4 !== 0 || ins.k > 60) throw new RangeError(`instruction ${pc} loads outside seccomp_data`);
        break;
      case JEQ_K:
      case JGE_K:
      case JSET_K:
        if (pc + 1 + Math.max(ins.jt, ins.jf) >= program.length) {
          throw new RangeError(`instruction ${pc} jumps past the end`);
        }
        break;
      case RET_K:
        break;
      default:
        throw new RangeError(`instruction ${pc} has an opcode this generator never emits: ${ins.code}`);
    }
  });
  const last = program[program.length - 1] as BpfInstruction;
  if (last.code !== RET_K) throw new RangeError("a BPF program must end with a return");
  const [a, b, c] = program;
  if (a?.code !== LD_W_ABS || a.k !== OFFSET_ARCH || b?.code !== JEQ_K || b.k !== AUDIT_ARCH[arch] || b.jt !== 1) {
    throw new RangeError("the program does not check the architecture first");
  }
  if (c?.code !== RET_K || c.k !== SECCOMP_RET_KILL_PROCESS) {
    throw new RangeError("a foreign architecture is not killed");
  }
}

export interface SeccompData {
  arch: number;
  nr: number;
  /** Six arguments as 64-bit values. */
  args?: bigint[];
}

/** Runs a program on one syscall, as the kernel would; returns the action (SECCOMP_RET_*) with its data. */
export function runFilter(program: readonly BpfInstruction[], data: SeccompData): number {
  const args = data.args ?? [];
  const word = (offset: number): number => {
    if (offset === OFFSET_NR) return data.nr >>> 0;
    if (offset === OFFSET_ARCH) return data.arch >>> 0;
    if (offset >= 16 && offset < 64) {
      const value = args[Math.floor((offset - 16) / 8)] ?? 0n;
      const high = (offset - 16) % 8 === 4;
      return Number((high ? value >> 32n : value) & 0xffffffffn);
    }
    throw new RangeError(`load of offset ${offset} is not emulated`);
  };
  let a = 0;
  let pc = 0;
  for (let steps = 0; steps < 10_000; steps++) {
    const ins = program[pc];
    if (!ins) throw new RangeError("the program ran off its end");
    switch (ins.code) {
      case LD_W_ABS:
        a = word(ins.k);
        pc++;
        break;
      case JEQ_K:
        pc += 1 + (a === ins.k >>> 0 ? ins.jt : ins.jf);
        break;
      case JGE_K:
        pc += 1 + (a >>> 0 >= ins.k >>> 0 ? ins.jt : ins.jf);
        break;
      case JSET_K:
        pc += 1 + ((a & ins.k) !== 0 ? ins.jt : ins.jf);
        break;
      case RET_K:
        return ins.k >>> 0;
      default:
        throw new RangeError(`unknown opcode ${ins.code}`);
    }
  }
  throw new RangeError("the program did not return");
}

const NAMES: Record<number, string> = {
  [LD_W_ABS]: "ld",
  [JEQ_K]: "jeq",
  [JGE_K]: "jge",
  [JSET_K]: "jset",
  [RET_K]: "ret",
};

/** A readable listing of a program (one instruction a line), for reviews and test failures. */
export function disassemble(program: readonly BpfInstruction[]): string {
  return program
    .map((ins, pc) => {
      const name = NAMES[ins.code] ?? `op${ins.code}`;
      const k = `0x${(ins.k >>> 0).toString(16)}`;
      if (ins.code === LD_W_ABS) return `${pc}: ld [${ins.k}]`;
      if (ins.code === RET_K) return `${pc}: ret ${k}`;
      return `${pc}: ${name} ${k} ? ${pc + 1 + ins.jt} : ${pc + 1 + ins.jf}`;
    })
    .join("\n");
}
