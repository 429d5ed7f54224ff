"""Two "hosts" on one machine for multi-host `torchrun` tests: network namespaces on a veth pair.

Each host is a network namespace holding one end of a veth pair (10.77.0.1/24 and 10.77.0.2/24,
plus its own loopback). A network namespace alone still sees the machine's `/dev/shm` (the same
tmpfs), so every command run on a host also gets a private mount namespace with a fresh tmpfs on
`/dev/shm`: the hosts share the file system (the repository, the test's tmp dir) but not their
shared memory, as two machines would.

Names carry this process's pid (`pn2h<pid>a`, `pn2h<pid>b`; the namespace and its veth end share
the name), so concurrent runs never collide and a crashed run's leftovers are recognisable:
`remove_stale_hosts` deletes those whose pid is dead. `two_hosts()` raises `HostsUnavailable`
with the failing command's own words where namespaces cannot be made (not root, no `ip` or
`unshare`, a refused `ip netns add`, veth or tmpfs mount); callers skip on it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from prenoise.distributed.shm import pid_alive
from waits import READY_CEILING_S

PREFIX = "pn2h"
SUBNET = "10.77.0"
_NAME = re.compile(rf"^{PREFIX}(\d+)[ab]$")
AFTER_FAILURE_S = 15.0
"""How long the other hosts may still run once one host's command failed."""
# `ip netns exec` already enters a mount namespace; `unshare` makes it private explicitly, and
# the tmpfs on /dev/shm is this host's own shared memory (gone when its last process exits).
_PRIVATE_SHM = 'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"'


class HostsUnavailable(RuntimeError):
    """Network or mount namespaces cannot be made here (the message says why)."""


@dataclass(frozen=True)
class Host:
    """One namespace: its name (also its veth end's name), address and node rank."""

    name: str
    addr: str
    node_rank: int

    def argv(self, command: Sequence[str]) -> list[str]:
        """`command` run on this host: in its network namespace with a private /dev/shm."""
        return [
            "ip", "netns", "exec", self.name,
            "unshare", "--mount", "--propagation", "private",
            "sh", "-c", _PRIVATE_SHM, "sh", *command,
        ]  # fmt: skip


@dataclass
class HostRun:
    """What one host's command did: exit status (None: killed at the timeout) and its output."""

    host: Host
    returncode: int | None
    output: str


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=READY_CEILING_S, check=False
    )
    if check and proc.returncode != 0:
        raise HostsUnavailable(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc


def missing_tools() -> str | None:
    """Why namespaces certainly cannot be made here (not root, a tool missing), or None."""
    if os.geteuid() != 0:
        return "needs root to make network and mount namespaces"
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            return f"no `{tool}` on PATH (package {package})"
    return None


def _pids_in(name: str) -> list[int]:
    proc = _ip("netns", "pids", name, check=False)
    return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []


def kill_processes_in(name: str) -> None:
    """SIGKILL every process in namespace `name` (all of them started by this module's user)."""
    for pid in _pids_in(name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _delete(name: str) -> None:
    kill_processes_in(name)
    _ip("netns", "del", name, check=False)
    _ip("link", "del", name, check=False)  # a veth end never moved into its namespace


def remove_stale_hosts() -> list[str]:
    """Delete the namespaces (and stray veth ends) of earlier runs whose process is gone."""
    listed = _ip("netns", "list", check=False).stdout.split("\n")
    links = _ip("-o", "link", "show", check=False).stdout.split("\n")
    names = {line.split()[0] for line in listed if line.strip()}
    names |= {line.split(":")[1].strip().split("@")[0] for line in links if line.count(":") > 1}
    stale = sorted(n for n in names if (m := _NAME.match(n)) and not pid_alive(int(m.group(1))))
    for name in stale:
        _delete(name)
    return stale


def _build(a: Host, b: Host) -> None:
    _ip("netns", "add", a.name)
    _ip("netns", "add", b.name)
    _ip("link", "add", a.name, "type", "veth", "peer", "name", b.name)
    for host in (a, b):
        _ip("link", "set", host.name, "netns", host.name)
        _ip("-n", host.name, "addr", "add", f"{host.addr}/24", "dev", host.name)
        _ip("-n", host.name, "link", "set", host.name, "up")
        _ip("-n", host.name, "link", "set", "lo", "up")


def _probe_private_shm(host: Host) -> None:
    """A private tmpfs on /dev/shm, on `host`, with a device other than this process's."""
    argv = host.argv(["stat", "-c", "%d", "/dev/shm"])
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=READY_CEILING_S, check=False
    )
    if proc.returncode != 0:
        raise HostsUnavailable(f"no private /dev/shm in a namespace: {proc.stderr.strip()}")
    if int(proc.stdout) == os.stat("/dev/shm").st_dev:
        raise HostsUnavailable("the namespace's /dev/shm is still the machine's")


@contextlib.contextmanager
def two_hosts() -> Iterator[tuple[Host, Host]]:
    """Two hosts on a veth pair, deleted (their processes killed first) on every way out."""
    reason = missing_tools()
    if reason is not None:
        raise HostsUnavailable(reason)
    remove_stale_hosts()
    a = Host(f"{PREFIX}{os.getpid()}a", f"{SUBNET}.1", 0)
    b = Host(f"{PREFIX}{os.getpid()}b", f"{SUBNET}.2", 1)
    try:
        _build(a, b)
        _probe_private_shm(a)
        yield a, b
    finally:
        for host in (a, b):
            _delete(host.name)


def _wait(procs: dict[Host, subprocess.Popen[bytes]], timeout_s: float) -> dict[Host, int | None]:
    """Exit statuses once all exited; None for those still running at `timeout_s`, or
    `AFTER_FAILURE_S` after another host failed (its ranks may wait for the dead ones)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        codes = {host: proc.poll() for host, proc in procs.items()}
        if all(code is not None for code in codes.values()):
            break
        if any(code for code in codes.values()):
            deadline = min(deadline, time.monotonic() + AFTER_FAILURE_S)
        time.sleep(0.1)
    return {host: proc.poll() for host, proc in procs.items()}


def run_on_hosts(
    commands: dict[Host, Sequence[str]],
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    logs: Path | None = None,
) -> list[HostRun]:
    """Run each host's command at once (`GLOO_SOCKET_IFNAME` set to its veth) and wait for all
    (see `_wait`). Whatever still runs then is killed: the launcher's process group and
    everything in the namespace (torchrun starts its workers in sessions of their own); its
    `returncode` is None. Each host's output goes to `logs/<name>.log` (default: `cwd`)."""
    files = {host: (logs or cwd) / f"{host.name}.log" for host in commands}
    procs = {}
    for host, command in commands.items():
        with files[host].open("w") as log:
            procs[host] = subprocess.Popen(
                host.argv(command),
                cwd=cwd,
                env={**env, "GLOO_SOCKET_IFNAME": host.name},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    codes = _wait(procs, timeout_s)
    for host, proc in procs.items():
        if codes[host] is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        kill_processes_in(host.name)  # stray workers, whatever the launcher's fate
    return [HostRun(h, codes[h], files[h].read_text(errors="replace")) for h in commands]
