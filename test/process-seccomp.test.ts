/**
 * The seccomp filters and the launch helper are generated as bytes; these tests decode what was generated and run the
 * filters on synthetic syscalls exactly as the kernel's classic-BPF interpreter would, for both architectures.
 */
import { describe, expect, it } from "vitest";
import {
  CONFIG_ADDRESS,
  CONFIG_BYTES,
  FILTER_OFFSET,
  HELPER_BASE,
  helperConfig,
  helperElf,
  RLIMIT,
} from "../dist/process/isolation/helper.js";
import {
  AUDIT_ARCH,
  baseFilter,
  CLONE_NAMESPACE_FLAGS,
  DENIED_SYSCALLS,
  decodeFilter,
  disassemble,
  ENOSYS,
  EPERM,
  encodeFilter,
  execFilter,
  runFilter,
  SECCOMP_RET_ALLOW,
  SECCOMP_RET_ERRNO,
  SECCOMP_RET_KILL_PROCESS,
  type SeccompArch,
  SYSCALLS,
  validateFilter,
} from "../dist/process/isolation/seccomp.js";

const ARCHES: SeccompArch[] = ["x86_64", "aarch64"];
const SECRET = [0x11111111, 0x22222222, 0x33333333, 0x44444444, 0x55555555, 0x66666666];
const secretArgs = [0x2222222211111111n, 0x4444444433333333n, 0x6666666655555555n];
const errno = (e: number) => (SECCOMP_RET_ERRNO | e) >>> 0;

describe.each(ARCHES)("seccomp filters for %s", (arch) => {
  const table = SYSCALLS[arch];
  const nr = (name: string) => table[name] as number;
  const call = (program: ReturnType<typeof baseFilter>, name: string, args: bigint[] = []) =>
    runFilter(program, { arch: AUDIT_ARCH[arch], nr: nr(name), args });

  it("encode and decode round-trip, and both programs pass validation", () => {
    for (const program of [baseFilter(arch), execFilter(arch, SECRET), execFilter(arch, SECRET, true)]) {
      const bytes = encodeFilter(program);
      expect(bytes.length).toBe(program.length * 8);
      const decoded = decodeFilter(bytes);
      expect(decoded).toEqual(program);
      expect(() => validateFilter(decoded, arch)).not.toThrow();
    }
    expect(disassemble(baseFilter(arch)).split("\n").slice(0, 3)).toEqual([
      "0: ld [4]",
      `1: jeq 0x${AUDIT_ARCH[arch].toString(16)} ? 3 : 2`,
      "2: ret 0x80000000",
    ]);
  });

  it("kills a syscall of any other architecture", () => {
    const other = arch === "x86_64" ? AUDIT_ARCH.aarch64 : AUDIT_ARCH.x86_64;
    for (const program of [baseFilter(arch), execFilter(arch, SECRET)]) {
      expect(runFilter(program, { arch: other, nr: nr("read") })).toBe(SECCOMP_RET_KILL_PROCESS);
      expect(runFilter(program, { arch: 0x40000003, nr: 11 })).toBe(SECCOMP_RET_KILL_PROCESS); // i386
    }
  });

  it("refuses sockets, ptrace, mounts, namespaces and keyrings with EPERM, and allows ordinary syscalls", () => {
    const base = baseFilter(arch);
    for (const name of DENIED_SYSCALLS) {
      if (table[name] === undefined) continue;
      expect(call(base, name), name).toBe(errno(EPERM));
    }
    for (const name of ["read", "close", "prctl", "exit_group", "execve", "prlimit64", "seccomp"]) {
      expect(call(base, name), name).toBe(SECCOMP_RET_ALLOW);
    }
    for (const name of ["clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"]) {
      expect(call(base, name), name).toBe(errno(ENOSYS));
    }
  });

  it("allows clone for threads and forks but not with a namespace flag", () => {
    const base = baseFilter(arch);
    const CLONE_THREAD_FLAGS = 0x3d0f00n;
    expect(call(base, "clone", [CLONE_THREAD_FLAGS])).toBe(SECCOMP_RET_ALLOW);
    expect(call(base, "clone", [17n])).toBe(SECCOMP_RET_ALLOW); // SIGCHLD: fork
    for (let bit = 0; bit < 32; bit++) {
      const flag = 1 << bit;
      if ((CLONE_NAMESPACE_FLAGS & flag) === 0) continue;
      expect(call(base, "clone", [BigInt(flag >>> 0) | 17n]), `flag 0x${flag.toString(16)}`).toBe(errno(EPERM));
    }
  });

  it.runIf(arch === "x86_64")("refuses x32 syscalls", () => {
    expect(runFilter(baseFilter(arch), { arch: AUDIT_ARCH.x86_64, nr: 0x40000000 + 41 })).toBe(errno(EPERM));
  });

  it("allows execve only with the secret in arguments 4-6, and never execveat or raising an rlimit", () => {
    for (const program of [execFilter(arch, SECRET), execFilter(arch, SECRET, true)]) {
      expect(call(program, "execve", [1n, 2n, 3n, ...secretArgs])).toBe(SECCOMP_RET_ALLOW);
      expect(call(program, "execve", [1n, 2n, 3n])).toBe(errno(EPERM));
      // Each word matters: flipping any one bit of the secret is refused.
      for (let i = 0; i < 3; i++) {
        for (const bit of [0n, 31n, 32n, 63n]) {
          const args = [...secretArgs];
          args[i] = (args[i] as bigint) ^ (1n << bit);
          expect(call(program, "execve", [1n, 2n, 3n, ...args])).toBe(errno(EPERM));
        }
      }
      expect(call(program, "execveat", [1n, 2n, 3n, ...secretArgs])).toBe(errno(EPERM));
      expect(call(program, "setrlimit", [7n, 0x1000n])).toBe(errno(EPERM));
      expect(call(program, "prlimit64", [0n, 7n, 0x1000n, 0n])).toBe(errno(EPERM));
      expect(call(program, "prlimit64", [0n, 7n, 0x1_0000_0000n, 0n])).toBe(errno(EPERM));
      expect(call(program, "prlimit64", [0n, 7n, 0n, 0x1000n])).toBe(SECCOMP_RET_ALLOW);
      expect(call(program, "read")).toBe(SECCOMP_RET_ALLOW);
    }
    expect(call(execFilter(arch, SECRET, true), "socket")).toBe(errno(EPERM));
  });

  it("builds a static ELF for the helper whose entry point lies in its executable segment", () => {
    const elf = helperElf(arch);
    expect(elf.subarray(0, 4).toString("latin1")).toBe("\x7fELF");
    expect(elf[4]).toBe(2); // 64-bit
    expect(elf.readUInt16LE(16)).toBe(2); // ET_EXEC: static, fixed addresses
    expect(elf.readUInt16LE(18)).toBe(arch === "x86_64" ? 62 : 183);
    const entry = Number(elf.readBigUInt64LE(24));
    expect(elf.readUInt16LE(56)).toBe(2);
    const segments = [0, 1].map((i) => {
      const at = 64 + i * 56;
      return {
        flags: elf.readUInt32LE(at + 4),
        vaddr: Number(elf.readBigUInt64LE(at + 16)),
        fileSize: Number(elf.readBigUInt64LE(at + 32)),
        memSize: Number(elf.readBigUInt64LE(at + 40)),
      };
    });
    expect(segments[0]).toEqual({ flags: 5, vaddr: HELPER_BASE, fileSize: elf.length, memSize: elf.length });
    expect(segments[1]).toEqual({ flags: 6, vaddr: CONFIG_ADDRESS, fileSize: 0, memSize: CONFIG_BYTES });
    expect(entry).toBeGreaterThan(HELPER_BASE);
    expect(entry).toBeLessThan(HELPER_BASE + elf.length);
    if (arch === "aarch64") expect((elf.length - (entry - HELPER_BASE)) % 4).toBe(0);
  });
});

describe("the helper's configuration block", () => {
  it("holds the secret, the filter program and the rlimits at the addresses the helper's code uses", () => {
    const filter = encodeFilter(execFilter("x86_64", SECRET));
    const limits = [
      { resource: RLIMIT.NOFILE, soft: 64n, hard: 64n },
      { resource: RLIMIT.AS, soft: 1n << 34n, hard: 1n << 34n },
    ];
    const block = helperConfig(secretArgs, limits, filter);
    expect(block.length).toBe(CONFIG_BYTES);
    expect([0, 1, 2].map((i) => block.readBigUInt64LE(i * 8))).toEqual(secretArgs);
    expect(block.readUInt16LE(24)).toBe(filter.length / 8);
    expect(Number(block.readBigUInt64LE(32))).toBe(CONFIG_ADDRESS + FILTER_OFFSET);
    expect(block.subarray(FILTER_OFFSET, FILTER_OFFSET + filter.length)).toEqual(filter);
    const slot = (i: number) => [0, 8, 16].map((o) => block.readBigUInt64LE(40 + i * 24 + o));
    expect(slot(0)).toEqual([7n, 64n, 64n]);
    expect(slot(1)).toEqual([9n, 1n << 34n, 1n << 34n]);
    expect(slot(7)).toEqual(slot(0)); // unused slots repeat the first limit
    expect(() => helperConfig(secretArgs, limits, Buffer.alloc(CONFIG_BYTES))).toThrow(/does not fit/);
  });
});
