"""The python tool's sandbox: a bubblewrap (`bwrap`) command line, and the seccomp filter it loads.

Why bubblewrap: it is the small, well-kept namespace tool Flatpak runs every app in, packaged
by every distribution (`apt-get install bubblewrap`), and it needs no daemon and no privilege
beyond unprivileged user namespaces. Rlimits alone cannot hide the server's processes, files
or network from model-written code; namespaces can.

What the sandbox gets (see `bwrap_argv`):
- new user, pid, ipc, uts, cgroup and mount namespaces, and a new network namespace (loopback
  only) unless the operator allows the network: it sees none of the server's processes (its
  parent is bwrap's own pid 1, which ignores the signals it could send), and no host socket;
- a root that holds only what the interpreter needs, read-only: `/usr`, the `/lib*`/`/bin`
  links or folders beside it, and the interpreter's own prefix (`sys.base_prefix`: its stdlib,
  not the server's virtualenv or source tree); a fresh `/proc` for its pid namespace, a
  minimal `/dev`; no `/etc`, `/home`, `/root`, `/tmp` of the host;
- one writable folder, `/sandbox`, a tmpfs of `scratch_bytes` (its cwd, HOME and TMPDIR): all
  it writes is in memory, capped, and gone when the call ends; the sandbox's own root and
  `/dev` (tmpfs mounts of no fixed size) are remounted read-only;
- `--clearenv` and four variables; `--new-session` (no terminal to inject input into);
  `--die-with-parent` (if the server dies, so does the sandbox); no capabilities; no new user
  namespaces inside;
- a seccomp filter (`seccomp_filter`) that refuses new processes: fork, vfork, clone without
  CLONE_THREAD (EAGAIN), clone3 (ENOSYS, so libc falls back to clone, where the flags can be
  read); and ptrace and process_vm_readv/writev (EPERM). Threads are allowed. Why not
  RLIMIT_NPROC: the kernel does not apply it to uid 0, and a server run as root (as in CI and
  many containers) would have no bound on a fork bomb.

The memory of one call is then bounded by its one process's address space (RLIMIT_AS, set by
the bootstrap inside) plus its scratch tmpfs; `PythonTool` caps how many calls run at once.
"""

from __future__ import annotations

import os
import platform
import shutil
import struct
import sys
from collections.abc import Sequence

from streamfold.statemachine import StreamfoldError

__all__ = ["SANDBOX_DIR", "SandboxUnavailable", "bwrap_argv", "find_bwrap", "seccomp_filter"]

SANDBOX_DIR = "/sandbox"

INSTALL_HINT = (
    "the python tool runs code in a bubblewrap sandbox, and `bwrap` is not on PATH: install it "
    "(Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
)


class SandboxUnavailable(StreamfoldError):
    """The sandbox cannot be built on this machine (bwrap missing, or namespaces refused)."""


def find_bwrap() -> str:
    """The path of `bwrap`, or raise `SandboxUnavailable` saying what to install."""
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable(INSTALL_HINT)
    return path


# Classic BPF, as seccomp reads it: struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_EAGAIN = 11
_ENOSYS = 38
_CLONE_THREAD = 0x00010000
_X32_BIT = 0x40000000

_EPERM = 1
# arch -> (AUDIT_ARCH_*, clone, clone3, (fork-like syscalls), (ptrace, process_vm_readv/writev))
_ARCHES = {
    "x86_64": (0xC000003E, 56, 435, (57, 58), (101, 310, 311)),  # fork, vfork
    "aarch64": (0xC00000B7, 220, 435, (), (117, 270, 271)),  # no fork/vfork syscalls there
}


def seccomp_filter(machine: str | None = None) -> bytes:
    """A seccomp program that refuses new processes and allows everything else (threads
    included). Syscalls of another ABI (i386, x32) are refused with ENOSYS, since their numbers
    differ. Raises `SandboxUnavailable` on an architecture it does not know."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise SandboxUnavailable(f"the python sandbox knows no seccomp numbers for {machine!r}")
    arch, clone, clone3, forks, tracing = _ARCHES[machine]
    # (opcode, k, jump-if-true label, jump-if-false label); a label None means "the next one".
    code: list[tuple[int, int, str | None, str | None]] = [
        (_LD_W_ABS, 4, None, None),  # seccomp_data.arch
        (_JEQ_K, arch, None, "enosys"),
        (_LD_W_ABS, 0, None, None),  # seccomp_data.nr
        (_JGE_K, _X32_BIT, "enosys", None),
        (_JEQ_K, clone3, "enosys", None),
        *((_JEQ_K, nr, "eagain", None) for nr in forks),
        # No reaching into another process of the sandbox (bwrap's own pid 1 included).
        *((_JEQ_K, nr, "eperm", None) for nr in tracing),
        (_JEQ_K, clone, None, "allow"),
        (_LD_W_ABS, 16, None, None),  # args[0]'s low word (little endian): clone's flags
        (_JSET_K, _CLONE_THREAD, "allow", "eagain"),
    ]
    returns = {
        "allow": _RET_ALLOW,
        "eagain": _RET_ERRNO | _EAGAIN,
        "eperm": _RET_ERRNO | _EPERM,
        "enosys": _RET_ERRNO | _ENOSYS,
    }
    where = {label: len(code) + i for i, label in enumerate(returns)}

    def jump(at: int, label: str | None) -> int:
        return 0 if label is None else where[label] - at - 1

    program = [
        struct.pack("=HBBI", op, jump(at, jt), jump(at, jf), k)
        for at, (op, k, jt, jf) in enumerate(code)
    ]
    program += [struct.pack("=HBBI", _RET_K, 0, 0, value) for value in returns.values()]
    return b"".join(program)


def _root_binds() -> list[str]:
    """`/usr` read-only, and the `/bin`, `/lib*`, `/sbin` beside it as the host has them
    (links on a merged-/usr system, folders elsewhere)."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            argv += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            argv += ["--ro-bind", name, name]
    return argv


def bwrap_argv(
    bwrap: str,
    *,
    seccomp_fd: int,
    scratch_bytes: int,
    network: bool,
    files: Sequence[tuple[int, str]] = (),
    prefix: str = sys.base_prefix,
) -> list[str]:
    """bwrap's options for one call, up to and including `--` (the command follows). `files`:
    (fd, name) pairs bwrap copies into the scratch folder before the command starts."""
    argv = [
        bwrap,
        "--unshare-all",
        "--unshare-user",  # --unshare-all only tries it; without it there is no sandbox
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "HOME",
        SANDBOX_DIR,
        "--setenv",
        "TMPDIR",
        SANDBOX_DIR,
    ]
    if network:
        argv.append("--share-net")
    argv += _root_binds()
    real_prefix = os.path.realpath(prefix)
    if not real_prefix.startswith("/usr/") and real_prefix != "/usr":
        argv += ["--ro-bind", real_prefix, real_prefix]
    argv += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(scratch_bytes),
        "--tmpfs",
        SANDBOX_DIR,
        "--chdir",
        SANDBOX_DIR,
    ]
    for fd, name in files:
        argv += ["--file", str(fd), f"{SANDBOX_DIR}/{name}"]
    # The root and /dev are tmpfs mounts bwrap makes without a size: left writable, a call
    # could fill the host's memory with files (each under RLIMIT_FSIZE, as many as it likes).
    # Read-only, the scratch folder (sized) is the one place it writes.
    argv += ["--remount-ro", "/dev", "--remount-ro", "/"]
    argv += ["--seccomp", str(seccomp_fd), "--"]
    return argv
