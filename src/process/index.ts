/** The process tier: VMs in child processes isolated by bubblewrap (namespaces, seccomp, rlimits) or gVisor. */
export {
  DEFAULT_LIMITS as DEFAULT_PROCESS_LIMITS,
  IsolationUnavailableError,
  type ProcessIsolationOptions,
  type ProcessLimits,
  type ProcessProtections,
  type ProcessRuntime,
} from "./isolation/resolve.ts";
export { DEFAULT_VMS_PER_CHILD, ProcessCodemodeSandbox, type ProcessCodemodeSandboxOptions } from "./sandbox.ts";
