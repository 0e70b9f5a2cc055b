"""Per-child resource limits, set in the spawned process between fork and exec (never on the gateway).

`preexec(limits, parent_pid)` builds the child's preexec_fn in the parent: it asks for SIGKILL when the parent
dies (mcpgate.child.orphans), enters a private network namespace when asked (CLONE_NEWNET as root, CLONE_NEWUSER |
CLONE_NEWNET otherwise: whichever the start-up probe found to work; its own loopback brought up, nothing else
there), sets PR_SET_NO_NEW_PRIVS (always), then
RLIMIT_CPU (soft = the limit: SIGXCPU; hard = the limit + 1: SIGKILL), RLIMIT_AS and RLIMIT_NOFILE. Every libc
function is looked up and every value computed before the fork; the child only makes system calls.

The rest is how an exit is put down to a limit (`exit_limit`) and the words the clients and the log see.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import re
import resource
import signal
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcpgate.child.orphans import _libc_prctl, preexec_die_with_parent

if TYPE_CHECKING:
    from mcpgate.config.settings import Settings

PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4  # the worker is not dumpable (mcpgate.child.boundary); its forked child neither, until its exec
SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK = 0x1, 0x8
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
LIMIT_PREFIX = "limit: "
# What a program prints when an allocation fails (Python, C, C++, Node/V8, Go, Rust).
_MEMORY_FAILURE = re.compile(
    rb"MemoryError|out of memory|Cannot allocate memory|std::bad_alloc|memory allocation of \d+ bytes failed",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class ChildLimits:
    """The limits of one server's children (each field as its setting: 0 / False is no limit)."""

    cpu_seconds: int
    memory_bytes: int
    open_files: int
    processes: int
    no_network: bool
    request_timeout: float

    @classmethod
    def of(cls, settings: Settings) -> ChildLimits | None:
        """The settings' limits, or None when none is set (no_new_privs is set for every child anyway)."""
        limits = cls(
            cpu_seconds=settings.child_cpu_seconds,
            memory_bytes=settings.child_memory_bytes,
            open_files=settings.child_open_files,
            processes=settings.child_processes,
            no_network=settings.child_no_network,
            request_timeout=settings.request_timeout,
        )
        return limits if limits.any else None

    @property
    def any(self) -> bool:
        return bool(
            self.cpu_seconds
            or self.memory_bytes
            or self.open_files
            or self.processes
            or self.no_network
            or self.request_timeout
        )

    @property
    def watched(self) -> bool:
        """Whether the watchdog has anything to sweep for (open files and the network need no watching)."""
        return bool(self.cpu_seconds or self.memory_bytes or self.processes or self.request_timeout)


@dataclass(slots=True)
class Usage:
    """What was seen of a child while it ran (by the watchdog's sweeps and the stderr reader)."""

    cpu: float = 0.0  # CPU seconds of the process group at the last sweep
    vsize: int = 0  # the largest address space of the child seen by a sweep, in bytes
    memory_failure: bool = False  # its stderr reported a failed allocation


# -- the words --------------------------------------------------------------------------------------------


def cpu_limit(limits: ChildLimits) -> str:
    return f"MCPGATE_CHILD_CPU_SECONDS ({limits.cpu_seconds} s)"


def memory_limit(limits: ChildLimits) -> str:
    return f"MCPGATE_CHILD_MEMORY_BYTES ({limits.memory_bytes} bytes)"


def processes_limit(limits: ChildLimits) -> str:
    return f"MCPGATE_CHILD_PROCESSES ({limits.processes})"


def timeout_limit(limits: ChildLimits) -> str:
    return f"MCPGATE_REQUEST_TIMEOUT ({limits.request_timeout:g} s)"


def limit_reason(passed: str) -> str:
    """The close reason of a child ended by a limit (the log's words), from the limit it passed."""
    return LIMIT_PREFIX + passed


def ended_message(reason: str, otherwise: str) -> str:
    """What a child's waiting requests are told of its end: the limit it passed, else `otherwise` + reason."""
    if reason.startswith(LIMIT_PREFIX):
        return f"The MCP server was ended: it passed {reason[len(LIMIT_PREFIX) :]}"
    return otherwise + reason


def mentions_memory_failure(line: bytes) -> bool:
    return _MEMORY_FAILURE.search(line) is not None


def exit_limit(limits: ChildLimits, returncode: int, usage: Usage, cpu_now: float | None = None) -> str | None:
    """The limit an exit nobody asked for is put down to, or None (then it is a crash or a clean exit).

    CPU: the kernel sends SIGXCPU at the soft limit and SIGKILL at the hard one (a second later); a SIGKILL
    counts when the CPU time seen (`cpu_now`, else the last sweep's, at most a sweep old) was near the limit.
    Memory: a failed exit after stderr reported a failed allocation, or with the address space seen within
    a tenth of the limit."""
    if limits.cpu_seconds and returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        seen = usage.cpu if cpu_now is None else max(cpu_now, usage.cpu)
        if returncode == -signal.SIGXCPU or seen >= limits.cpu_seconds - 1:
            return cpu_limit(limits)
    near = usage.memory_failure or usage.vsize >= limits.memory_bytes * 0.9
    if limits.memory_bytes and returncode != 0 and near:
        return memory_limit(limits)
    return None


def settle(limits: ChildLimits | None, asked: str | None, returncode: int, usage: Usage) -> tuple[str, str | None]:
    """A child's end cause, and the limit it passed (or None): a limit explains an exit nobody asked for (or
    a crash) when it can; else the cause close() was given; else "clean" for 0 and "crash" for the rest."""
    passed = exit_limit(limits, returncode, usage) if limits is not None and asked in (None, "crash") else None
    if passed is not None:
        return "limit", passed
    if asked is not None:
        return asked, None
    return ("clean" if returncode == 0 else "crash"), None


# -- in the spawned process ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _libc_unshare() -> Callable[[int], int] | None:
    """libc's unshare, looked up once in the parent; None when unavailable."""
    try:
        function: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).unshare
    except (OSError, AttributeError):
        return None
    return function


def _flag_candidates() -> list[int]:
    both = CLONE_NEWUSER | CLONE_NEWNET
    return [CLONE_NEWNET, both] if os.geteuid() == 0 else [both]


def _describe(flags: int) -> str:
    return "unshare(CLONE_NEWUSER|CLONE_NEWNET)" if flags & CLONE_NEWUSER else "unshare(CLONE_NEWNET)"


def _probe(unshare: Callable[[int], int], flags: int) -> int:
    """Fork a process that tries the unshare; 0 when it worked, else the errno it failed with."""
    pid = os.fork()
    if pid == 0:  # the probe: system calls only, then out
        code = 0
        try:
            if unshare(flags) != 0:
                code = ctypes.get_errno() or errno.EPERM
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else errno.ECHILD


@dataclass(frozen=True, slots=True)
class NetworkNamespace:
    flags: int  # what unshare() is called with; 0 when none works
    problem: str  # why children cannot be kept off the network ("" when they can)


@functools.lru_cache(maxsize=1)
def network_namespace() -> NetworkNamespace:
    """Which unshare() gives a child a private network namespace here, probed once (in the gunicorn master at
    start; the worker it forks inherits the answer)."""
    return probe_network_namespace(_libc_unshare(), _flag_candidates())


def probe_network_namespace(unshare: Callable[[int], int] | None, candidates: list[int]) -> NetworkNamespace:
    if unshare is None:
        return NetworkNamespace(0, "this system's C library has no unshare()")
    failures = []
    for flags in candidates:
        code = _probe(unshare, flags)
        if code == 0:
            return NetworkNamespace(flags, "")
        failures.append(f"{_describe(flags)}: {os.strerror(code)}")
    return NetworkNamespace(0, "; ".join(failures))


def network_problem() -> str | None:
    """The refusal when MCPGATE_CHILD_NO_NETWORK cannot be honoured here, else None."""
    found = network_namespace()
    if not found.problem:
        return None
    return (
        "MCPGATE_CHILD_NO_NETWORK=true, but this kernel does not let mcpgate give a child a private network "
        f"namespace ({found.problem}). Allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0; "
        "kernel.unprivileged_userns_clone=1 or kernel.apparmor_restrict_unprivileged_userns=0 where those "
        "exist), run the gateway with CAP_SYS_ADMIN, or unset MCPGATE_CHILD_NO_NETWORK."
    )


def _rlimits(limits: ChildLimits) -> list[tuple[int, tuple[int, int]]]:
    """(resource, (soft, hard)) to set; a hard limit is never raised past the parent's unless it may be."""
    wanted: list[tuple[int, int, int]] = []
    if limits.cpu_seconds:
        wanted.append((resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1))
    if limits.memory_bytes:
        wanted.append((resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes))
    if limits.open_files:
        wanted.append((resource.RLIMIT_NOFILE, limits.open_files, limits.open_files))
    out = []
    for which, soft, hard in wanted:
        current = resource.getrlimit(which)[1]
        if current != resource.RLIM_INFINITY and os.geteuid() != 0:
            soft, hard = min(soft, current), min(hard, current)
        out.append((which, (soft, hard)))
    return out


def _id_maps() -> list[tuple[str, bytes]]:
    """The new user namespace maps the child's own ids to themselves (so getuid() tells the same)."""
    uid, gid = os.geteuid(), os.getegid()
    return [
        ("/proc/self/setgroups", b"deny"),
        ("/proc/self/uid_map", f"{uid} {uid} 1".encode()),
        ("/proc/self/gid_map", f"{gid} {gid} 1".encode()),
    ]


def _write_quietly(path: str, data: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return
    try:
        os.write(fd, data)
    except OSError:
        pass
    finally:
        os.close(fd)


def _loopback_up(ifreq: bytes) -> None:
    """Bring the new namespace's lo up (it starts down): the child may talk to itself, and to nothing else."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, ifreq)
    except OSError:
        pass


def preexec(limits: ChildLimits | None, parent_pid: int) -> Callable[[], None]:
    """The preexec_fn of every child: see the module docstring. An OSError it raises reaches the parent
    (gevent's subprocess pickles it), so a child that cannot get its limits is not started."""
    die_with_parent = preexec_die_with_parent(parent_pid)
    prctl = _libc_prctl()
    rlimits = _rlimits(limits) if limits is not None else []
    flags, unshare = 0, None
    if limits is not None and limits.no_network:
        found = network_namespace()
        if found.problem:
            raise OSError(errno.EPERM, f"no private network namespace: {found.problem}")
        flags, unshare = found.flags, _libc_unshare()
    maps = _id_maps() if flags & CLONE_NEWUSER else []
    ifreq = struct.pack("16sH22x", b"lo", IFF_UP | IFF_LOOPBACK)  # struct ifreq: the name, then the flags
    setrlimit = resource.setrlimit

    def child_preexec() -> None:  # runs in the forked child before exec: system calls only
        die_with_parent()
        if unshare is not None and unshare(flags) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"unshare: {os.strerror(code)}")
        if maps and prctl is not None:  # a non-dumpable process's /proc/self files are root's: open for the maps
            prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        for path, data in maps:
            _write_quietly(path, data)
        if maps and prctl is not None:
            prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        if unshare is not None:
            _loopback_up(ifreq)
        if prctl is not None:
            prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        for which, pair in rlimits:
            setrlimit(which, pair)

    return child_preexec
