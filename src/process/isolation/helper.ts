/**
 * The launch helper: a tiny static executable, generated here as machine code for x86-64 and arm64 (no compiler,
 * no libc), that bubblewrap starts in place of node. It
 *
 * 1. reads its configuration, exactly CONFIG_BYTES, from stdin (the host writes it ahead of the first frame, so no
 *    extra descriptor is needed: gVisor passes stdio only),
 * 2. sets PR_SET_NO_NEW_PRIVS and the rlimits (now, inside the sandbox's user namespace, so that the process limit
 *    counts the sandbox's own processes only),
 * 3. loads the exec filter (see seccomp.ts), and
 * 4. executes node with its own argv[1..] and an empty environment (not even the PWD bubblewrap sets), carrying the exec secret in the 4th-6th argument
 *    registers, which execve ignores and the exec filter checks.
 *
 * After that execve the secret exists only in the kernel's copy of the filter: it was never in a file, an argument or
 * the environment, so nothing in the child can repeat an execve. Each failing step exits with its own status
 * (HELPER_EXIT), which the host turns into an error message.
 *
 * Configuration layout (little-endian, at the fixed address CONFIG_ADDRESS):
 *   0   u64[3]  exec secret (arguments 4, 5 and 6 of the final execve)
 *   24  sock_fprog { u16 len; u8 pad[6]; u64 filter }  (filter = CONFIG_ADDRESS + FILTER_OFFSET)
 *   40  8 x { u64 resource; u64 soft; u64 hard }
 *   232 the exec filter's sock_filter instructions
 */
import type { SeccompArch } from "./seccomp.ts";

export const HELPER_BASE = 0x10000000;
export const CONFIG_ADDRESS = HELPER_BASE + 0x100000;
export const CONFIG_BYTES = 8192;
const FPROG_OFFSET = 24;
const LIMITS_OFFSET = 40;
export const LIMIT_SLOTS = 8;
export const FILTER_OFFSET = LIMITS_OFFSET + LIMIT_SLOTS * 24;
export const MAX_FILTER_INSTRUCTIONS = (CONFIG_BYTES - FILTER_OFFSET) / 8;

/** Exit statuses of the helper, by failed step. */
export const HELPER_EXIT = {
  read: 91,
  shortConfig: 92,
  noNewPrivs: 93,
  seccomp: 94,
  exec: 95,
  /** 100 + slot: setting the rlimit of that slot failed. */
  rlimit: 100,
} as const;

/** RLIMIT_* numbers (the same on x86-64 and arm64). */
export const RLIMIT = {
  CPU: 0,
  FSIZE: 1,
  STACK: 3,
  CORE: 4,
  NPROC: 6,
  NOFILE: 7,
  MEMLOCK: 8,
  AS: 9,
} as const;

export interface HelperLimit {
  resource: number;
  soft: bigint;
  hard: bigint;
}

const SYS = {
  x86_64: { read: 0, prctl: 157, prlimit64: 302, seccomp: 317, execve: 59, exit_group: 231 },
  aarch64: { read: 63, prctl: 167, prlimit64: 261, seccomp: 277, execve: 221, exit_group: 94 },
};
const PR_SET_NO_NEW_PRIVS = 38;
const SECCOMP_SET_MODE_FILTER = 1;

/** The configuration block for one child. */
export function helperConfig(secret: readonly bigint[], limits: readonly HelperLimit[], filter: Buffer): Buffer {
  if (secret.length !== 3) throw new RangeError("the exec secret is three 64-bit words");
  if (limits.length < 1 || limits.length > LIMIT_SLOTS) throw new RangeError(`1 to ${LIMIT_SLOTS} rlimits`);
  const instructions = filter.length / 8;
  if (!Number.isInteger(instructions) || instructions < 1 || instructions > MAX_FILTER_INSTRUCTIONS) {
    throw new RangeError("the exec filter does not fit the helper's configuration block");
  }
  const out = Buffer.alloc(CONFIG_BYTES);
  secret.forEach((word, i) => {
    out.writeBigUInt64LE(word, i * 8);
  });
  out.writeUInt16LE(instructions, FPROG_OFFSET);
  out.writeBigUInt64LE(BigInt(CONFIG_ADDRESS + FILTER_OFFSET), FPROG_OFFSET + 8);
  for (let slot = 0; slot < LIMIT_SLOTS; slot++) {
    // Unused slots repeat the first limit, which sets it again to the same value.
    const limit = limits[slot] ?? (limits[0] as HelperLimit);
    const at = LIMITS_OFFSET + slot * 24;
    out.writeBigUInt64LE(BigInt(limit.resource), at);
    out.writeBigUInt64LE(limit.soft, at + 8);
    out.writeBigUInt64LE(limit.hard, at + 16);
  }
  filter.copy(out, FILTER_OFFSET);
  return out;
}

// ---- x86-64 ----

class X64 {
  readonly bytes: number[] = [];
  private readonly labels = new Map<string, number>();
  private readonly fixups: { at: number; label: string }[] = [];

  emit(...bytes: number[]): void {
    this.bytes.push(...bytes);
  }
  imm32(value: number): number[] {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(value >>> 0);
    return [...b];
  }
  label(name: string): void {
    this.labels.set(name, this.bytes.length);
  }
  /** A rel32 jump: `opcode` is E9 (jmp) or 0F 8x (jcc). */
  jump(opcode: number[], label: string): void {
    this.emit(...opcode);
    this.fixups.push({ at: this.bytes.length, label });
    this.emit(0, 0, 0, 0);
  }
  movEdi(v: number): void {
    this.emit(0xbf, ...this.imm32(v));
  }
  movEsi(v: number): void {
    this.emit(0xbe, ...this.imm32(v));
  }
  movEdx(v: number): void {
    this.emit(0xba, ...this.imm32(v));
  }
  movEax(v: number): void {
    this.emit(0xb8, ...this.imm32(v));
  }
  syscall(): void {
    this.emit(0x0f, 0x05);
  }
  testRax(): void {
    this.emit(0x48, 0x85, 0xc0);
  }
  /** exit_group(status), skipped when the preceding condition `skip` (a jcc rel8 opcode) holds. */
  exitUnless(skip: number, status: number): void {
    this.emit(skip, 12);
    this.movEdi(status);
    this.movEax(SYS.x86_64.exit_group);
    this.syscall();
  }
  finish(): number[] {
    for (const { at, label } of this.fixups) {
      const target = this.labels.get(label);
      if (target === undefined) throw new Error(`unknown label ${label}`);
      const rel = Buffer.alloc(4);
      rel.writeInt32LE(target - (at + 4));
      this.bytes.splice(at, 4, ...rel);
    }
    return this.bytes;
  }
}

const JZ8 = 0x74;
const JNS8 = 0x79;

function x64Code(): number[] {
  const a = new X64();
  const sys = SYS.x86_64;
  a.emit(0x49, 0xc7, 0xc4, ...a.imm32(CONFIG_ADDRESS)); // mov r12, CONFIG_ADDRESS
  a.emit(0x49, 0xc7, 0xc5, ...a.imm32(CONFIG_BYTES)); // mov r13, CONFIG_BYTES
  a.label("read");
  a.emit(0x31, 0xff); // xor edi, edi (stdin)
  a.emit(0x4c, 0x89, 0xe6); // mov rsi, r12
  a.emit(0x4c, 0x89, 0xea); // mov rdx, r13
  a.movEax(sys.read);
  a.syscall();
  a.testRax();
  a.exitUnless(JNS8, HELPER_EXIT.read);
  a.jump([0x0f, 0x84], "eof"); // jz eof
  a.emit(0x49, 0x01, 0xc4); // add r12, rax
  a.emit(0x49, 0x29, 0xc5); // sub r13, rax
  a.jump([0x0f, 0x85], "read"); // jnz read
  a.label("eof");
  a.emit(0x4d, 0x85, 0xed); // test r13, r13
  a.exitUnless(JZ8, HELPER_EXIT.shortConfig);
  // prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
  a.movEdi(PR_SET_NO_NEW_PRIVS);
  a.movEsi(1);
  a.emit(0x31, 0xd2); // xor edx, edx
  a.emit(0x45, 0x31, 0xd2); // xor r10d, r10d
  a.emit(0x45, 0x31, 0xc0); // xor r8d, r8d
  a.movEax(sys.prctl);
  a.syscall();
  a.testRax();
  a.exitUnless(JZ8, HELPER_EXIT.noNewPrivs);
  for (let slot = 0; slot < LIMIT_SLOTS; slot++) {
    const at = CONFIG_ADDRESS + LIMITS_OFFSET + slot * 24;
    a.emit(0x31, 0xff); // xor edi, edi (this process)
    a.emit(0x8b, 0x34, 0x25, ...a.imm32(at)); // mov esi, [at]
    a.movEdx(at + 8); // the new limit
    a.emit(0x45, 0x31, 0xd2); // xor r10d, r10d (no old limit)
    a.movEax(sys.prlimit64);
    a.syscall();
    a.testRax();
    a.exitUnless(JZ8, HELPER_EXIT.rlimit + slot);
  }
  // seccomp(SECCOMP_SET_MODE_FILTER, 0, &fprog)
  a.movEdi(SECCOMP_SET_MODE_FILTER);
  a.emit(0x31, 0xf6); // xor esi, esi
  a.movEdx(CONFIG_ADDRESS + FPROG_OFFSET);
  a.movEax(sys.seccomp);
  a.syscall();
  a.testRax();
  a.exitUnless(JZ8, HELPER_EXIT.seccomp);
  // execve(argv[1], &argv[1], envp), secret in r10, r8, r9
  a.emit(0x48, 0x8b, 0x7c, 0x24, 0x10); // mov rdi, [rsp+16]
  a.emit(0x48, 0x8d, 0x74, 0x24, 0x10); // lea rsi, [rsp+16]
  a.emit(0x48, 0x8b, 0x04, 0x24); // mov rax, [rsp] (argc)
  a.emit(0x48, 0x8d, 0x54, 0xc4, 0x08); // lea rdx, [rsp + rax*8 + 8]: the NULL that ends argv, an empty environment
  a.emit(0x4c, 0x8b, 0x14, 0x25, ...a.imm32(CONFIG_ADDRESS)); // mov r10, [secret0]
  a.emit(0x4c, 0x8b, 0x04, 0x25, ...a.imm32(CONFIG_ADDRESS + 8)); // mov r8, [secret1]
  a.emit(0x4c, 0x8b, 0x0c, 0x25, ...a.imm32(CONFIG_ADDRESS + 16)); // mov r9, [secret2]
  a.movEax(sys.execve);
  a.syscall();
  a.movEdi(HELPER_EXIT.exec);
  a.movEax(sys.exit_group);
  a.syscall();
  return a.finish();
}

// ---- arm64 ----

function a64Code(): number[] {
  const sys = SYS.aarch64;
  const words: number[] = [];
  const labels = new Map<string, number>();
  const fixups: { at: number; label: string; kind: "cb" | "b" }[] = [];
  const w = (x: number) => words.push(x >>> 0);
  /** mov xd, imm (up to 32 bits here). */
  const mov = (rd: number, value: number) => {
    w(0xd2800000 | ((value & 0xffff) << 5) | rd);
    if (value > 0xffff) w(0xf2800000 | (1 << 21) | (((value >>> 16) & 0xffff) << 5) | rd);
  };
  const svc = () => w(0xd4000001);
  const exit = (status: number) => {
    mov(0, status);
    mov(8, sys.exit_group);
    svc();
  };
  /** Branches over the exit stub when x0 == 0 (cbz) or x0 >= 0 (tbz bit 63). */
  const exitUnlessZero = (status: number) => {
    w(0xb4000000 | (4 << 5) | 0); // cbz x0, +4 instructions
    exit(status);
  };
  const label = (name: string) => labels.set(name, words.length);
  const branch = (kind: "cb" | "b", base: number, name: string) => {
    fixups.push({ at: words.length, label: name, kind });
    w(base);
  };
  w(0x91000000 | (31 << 5) | 21); // mov x21, sp
  mov(19, CONFIG_ADDRESS);
  mov(20, CONFIG_BYTES);
  mov(22, CONFIG_ADDRESS);
  label("read");
  mov(0, 0); // stdin
  w(0xaa0003e0 | (19 << 16) | 1); // mov x1, x19
  w(0xaa0003e0 | (20 << 16) | 2); // mov x2, x20
  mov(8, sys.read);
  svc();
  w(0xb6000000 | (31 << 19) | (4 << 5) | 0); // tbz x0, #63, +4 instructions
  exit(HELPER_EXIT.read);
  branch("cb", 0xb4000000 | 0, "eof"); // cbz x0, eof
  w(0x8b000000 | (0 << 16) | (19 << 5) | 19); // add x19, x19, x0
  w(0xcb000000 | (0 << 16) | (20 << 5) | 20); // sub x20, x20, x0
  branch("cb", 0xb5000000 | 20, "read"); // cbnz x20, read
  label("eof");
  w(0xb4000000 | (4 << 5) | 20); // cbz x20, +4 instructions
  exit(HELPER_EXIT.shortConfig);
  mov(0, PR_SET_NO_NEW_PRIVS);
  mov(1, 1);
  mov(2, 0);
  mov(3, 0);
  mov(4, 0);
  mov(8, sys.prctl);
  svc();
  exitUnlessZero(HELPER_EXIT.noNewPrivs);
  for (let slot = 0; slot < LIMIT_SLOTS; slot++) {
    const offset = LIMITS_OFFSET + slot * 24;
    mov(0, 0);
    w(0xb9400000 | ((offset / 4) << 10) | (22 << 5) | 1); // ldr w1, [x22, #offset]
    mov(2, CONFIG_ADDRESS + offset + 8);
    mov(3, 0);
    mov(8, sys.prlimit64);
    svc();
    exitUnlessZero(HELPER_EXIT.rlimit + slot);
  }
  mov(0, SECCOMP_SET_MODE_FILTER);
  mov(1, 0);
  mov(2, CONFIG_ADDRESS + FPROG_OFFSET);
  mov(8, sys.seccomp);
  svc();
  exitUnlessZero(HELPER_EXIT.seccomp);
  w(0xf9400000 | ((16 / 8) << 10) | (21 << 5) | 0); // ldr x0, [x21, #16]
  w(0x91000000 | (16 << 10) | (21 << 5) | 1); // add x1, x21, #16
  w(0xf9400000 | (0 << 10) | (21 << 5) | 9); // ldr x9, [x21] (argc)
  w(0x8b000000 | (9 << 16) | (3 << 10) | (21 << 5) | 2); // add x2, x21, x9, lsl #3
  w(0x91000000 | (8 << 10) | (2 << 5) | 2); // add x2, x2, #8: the NULL that ends argv, an empty environment
  w(0xf9400000 | (0 << 10) | (22 << 5) | 3); // ldr x3, [x22]
  w(0xf9400000 | (1 << 10) | (22 << 5) | 4); // ldr x4, [x22, #8]
  w(0xf9400000 | (2 << 10) | (22 << 5) | 5); // ldr x5, [x22, #16]
  mov(8, sys.execve);
  svc();
  exit(HELPER_EXIT.exec);
  for (const { at, label: name, kind } of fixups) {
    const target = labels.get(name);
    if (target === undefined) throw new Error(`unknown label ${name}`);
    const delta = target - at;
    const word = words[at] as number;
    words[at] = kind === "cb" ? (word | ((delta & 0x7ffff) << 5)) >>> 0 : (word | (delta & 0x3ffffff)) >>> 0;
  }
  const out: number[] = [];
  for (const word of words) out.push(word & 0xff, (word >>> 8) & 0xff, (word >>> 16) & 0xff, (word >>> 24) & 0xff);
  return out;
}

// ---- ELF ----

const ELF_HEADER = 64;
const PROGRAM_HEADER = 56;

/** The helper as a static ELF executable for `arch`: a text segment and a zeroed segment for the configuration. */
export function helperElf(arch: SeccompArch): Buffer {
  const code = arch === "x86_64" ? x64Code() : a64Code();
  const codeOffset = ELF_HEADER + 2 * PROGRAM_HEADER;
  const size = codeOffset + code.length;
  const out = Buffer.alloc(size);
  // e_ident
  out.write("\x7fELF", 0, "latin1");
  out[4] = 2; // 64-bit
  out[5] = 1; // little-endian
  out[6] = 1; // version
  out.writeUInt16LE(2, 16); // ET_EXEC
  out.writeUInt16LE(arch === "x86_64" ? 62 : 183, 18); // EM_X86_64 / EM_AARCH64
  out.writeUInt32LE(1, 20);
  out.writeBigUInt64LE(BigInt(HELPER_BASE + codeOffset), 24); // e_entry
  out.writeBigUInt64LE(BigInt(ELF_HEADER), 32); // e_phoff
  out.writeBigUInt64LE(0n, 40); // e_shoff
  out.writeUInt32LE(0, 48); // e_flags
  out.writeUInt16LE(ELF_HEADER, 52);
  out.writeUInt16LE(PROGRAM_HEADER, 54);
  out.writeUInt16LE(2, 56); // e_phnum
  out.writeUInt16LE(64, 58); // e_shentsize
  out.writeUInt16LE(0, 60);
  out.writeUInt16LE(0, 62);
  const segment = (index: number, flags: number, vaddr: number, fileSize: number, memSize: number) => {
    const at = ELF_HEADER + index * PROGRAM_HEADER;
    out.writeUInt32LE(1, at); // PT_LOAD
    out.writeUInt32LE(flags, at + 4);
    out.writeBigUInt64LE(0n, at + 8); // p_offset
    out.writeBigUInt64LE(BigInt(vaddr), at + 16);
    out.writeBigUInt64LE(BigInt(vaddr), at + 24);
    out.writeBigUInt64LE(BigInt(fileSize), at + 32);
    out.writeBigUInt64LE(BigInt(memSize), at + 40);
    out.writeBigUInt64LE(0x10000n, at + 48); // p_align (64 KiB suits 4K and 64K pages)
  };
  segment(0, 5, HELPER_BASE, size, size); // R+X: headers and code
  segment(1, 6, CONFIG_ADDRESS, 0, CONFIG_BYTES); // R+W: the configuration, zeroed
  Buffer.from(code).copy(out, codeOffset);
  return out;
}
