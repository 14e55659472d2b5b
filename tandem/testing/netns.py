"""Test hosts on one machine: each a Linux network namespace with its own address on a bridge.

    with Network.open() as net:             # a bridge with a private /24, nothing routed outside
        gw = net.add_host("gw0")            # namespace + veth pair; gw.addr is e.g. 10.213.57.2
        subprocess.run(net.argv(gw, ["ss", "-ltn"]))
        net.cut(gw)                         # its link down: packets to and from it are lost
        net.restore(gw)
        net.limit(gw, rate_mbit=20)         # tbf both ways on its link
    # every namespace, veth and the bridge are gone here (also after an exception)

Layout: one bridge `<prefix>br` in the root namespace holds the first address of the subnet (so
the test process, in the root namespace, reaches every host); each host is a namespace
`<prefix>-<name>` whose `eth0` is one end of a veth pair, the other end (`<prefix>v<i>`) a port of
the bridge. Inside a namespace 127.0.0.1 is that host's own loopback, so a process that dials or
advertises a loopback address to another host fails instead of reaching it by accident.

Faults act on the root-side end of a host's veth: `cut` sets it down (the bridge drops the
host's traffic: a vanished host, not a refusing one), `limit` puts a tbf on both directions.
Latency and stalls need a relay on the path (tandem/testing/relay.py): there is no netem here.

Names carry a prefix made of "th", this process's id and a letter, so that concurrent test runs do not
collide and `sweep_stale()` can remove what a killed run left behind (namespaces and links whose
prefix names a process that no longer exists). Needs root and `ip` (iproute2); `unavailable()`
says why not when they are missing.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

SUBNET_BASE = "10.213.0.0/16"     # hosts get a free /24 inside it
_STALE = re.compile(r"^th([0-9a-f]{6})[g-z](?:-|br$|v\d+$|p\d+$)")
_opened = itertools.count()


class NetnsError(RuntimeError):
    """An `ip` or `tc` command failed: the message has the command and its output."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
    return r


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (run the tests as root, as CI does)"
    probe = f"th{os.getpid():06x}-probe"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass(frozen=True)
class Host:
    name: str          # short name in the test: "gw0", "p1", "store"
    netns: str         # the namespace (ip netns exec NETNS ...)
    addr: str          # its address on the bridge
    link: str          # root-side end of its veth: what cut/limit act on

    def url(self, port: int) -> str:
        return f"http://{self.addr}:{port}"


@dataclass
class Network:
    prefix: str
    subnet: ipaddress.IPv4Network
    hosts: dict[str, Host] = field(default_factory=dict)
    _links: list[str] = field(default_factory=list)
    _bridge: str | None = None

    @classmethod
    def open(cls, prefix: str | None = None) -> "Network":
        reason = unavailable()
        if reason is not None:
            raise NetnsError(reason)
        sweep_stale()
        # "th", the pid, a letter g-z per network of this process (sequential tests never reuse one)
        net = cls(prefix or f"th{os.getpid():06x}{'ghijklmnopqrstuvwxyz'[next(_opened) % 20]}",
                  _free_subnet())
        try:
            net._make_bridge()
        except BaseException:
            net.close()
            raise
        return net

    def __enter__(self) -> "Network":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def gateway_addr(self) -> str:
        """The bridge's address: where the test process (root namespace) is seen from a host."""
        return str(self.subnet.network_address + 1)

    def _make_bridge(self) -> None:
        br = f"{self.prefix}br"
        _ip("link", "add", br, "type", "bridge")
        self._bridge = br
        _ip("addr", "add", f"{self.gateway_addr}/{self.subnet.prefixlen}", "dev", br)
        _ip("link", "set", br, "up")

    def add_host(self, name: str) -> Host:
        if name in self.hosts:
            raise ValueError(f"host {name!r} exists")
        i = len(self.hosts)
        if i + 2 >= self.subnet.num_addresses - 1:
            raise ValueError("subnet full")
        ns, root_end, ns_end = f"{self.prefix}-{name}", f"{self.prefix}v{i}", f"{self.prefix}p{i}"
        addr = str(self.subnet.network_address + 2 + i)
        _ip("netns", "add", ns)
        host = Host(name, ns, addr, root_end)
        self.hosts[name] = host
        _ip("link", "add", root_end, "type", "veth", "peer", "name", ns_end)
        self._links.append(root_end)
        _ip("link", "set", ns_end, "netns", ns)
        _ip("link", "set", root_end, "master", self._bridge)
        _ip("link", "set", root_end, "up")
        _ip("-n", ns, "link", "set", ns_end, "name", "eth0")
        _ip("-n", ns, "addr", "add", f"{addr}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        return host

    def argv(self, host: Host, argv: list[str]) -> list[str]:
        """`argv` run inside the host's namespace (`ip netns exec` execs it: same pid, same env)."""
        return ["ip", "netns", "exec", host.netns, *argv]

    def run(self, host: Host, argv: list[str], timeout_s: float = 30.0) -> str:
        r = subprocess.run(self.argv(host, argv), capture_output=True, text=True, timeout=timeout_s)
        if r.returncode != 0:
            raise NetnsError(f"{host.name}: {' '.join(argv)}: {r.stderr.strip()}")
        return r.stdout

    # --- faults ---------------------------------------------------------------------------------
    def cut(self, host: Host) -> None:
        """The host's link down: its packets are lost (nothing refuses, nothing answers)."""
        _ip("link", "set", host.link, "down")

    def restore(self, host: Host) -> None:
        _ip("link", "set", host.link, "up")

    def limit(self, host: Host, rate_mbit: float, burst_kbit: int = 64, latency_ms: int = 400) -> None:
        """A token bucket of `rate_mbit` on the host's link, both directions."""
        tbf = ["root", "tbf", "rate", f"{rate_mbit}mbit", "burst", f"{burst_kbit}kbit",
               "latency", f"{latency_ms}ms"]
        _tc("qdisc", "replace", "dev", host.link, *tbf)
        _tc("qdisc", "replace", "dev", "eth0", *tbf, netns=host.netns)

    def unlimit(self, host: Host) -> None:
        _tc("qdisc", "del", "dev", host.link, "root", check=False)
        _tc("qdisc", "del", "dev", "eth0", "root", netns=host.netns, check=False)

    # --- what the host's processes do -------------------------------------------------------------
    def sockets(self, host: Host, listening: bool) -> list["Socket"]:
        """TCP sockets in the host's namespace: listening ones, or established connections."""
        out = self.run(host, ["ss", "-Htnp", *(["-l"] if listening else ["state", "established"])])
        return [s for s in map(_parse_ss, out.splitlines()) if s is not None]

    # --- teardown ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Remove every link and namespace made here (idempotent; keeps going on errors)."""
        for link in self._links:
            _ip("link", "del", link, check=False)
        self._links.clear()
        for host in self.hosts.values():
            _ip("netns", "del", host.netns, check=False)
        self.hosts.clear()
        if self._bridge is not None:
            _ip("link", "del", self._bridge, check=False)
            self._bridge = None


@dataclass(frozen=True)
class Socket:
    local: str        # address (no brackets)
    port: int
    peer: str
    peer_port: int | None
    process: str      # ss's users:(...) field, e.g. '("python",pid=12,fd=3)'

    @property
    def pids(self) -> list[int]:
        return [int(p) for p in re.findall(r"pid=(\d+)", self.process)]


def _split_hostport(text: str) -> tuple[str, int | None]:
    host, _, port = text.rpartition(":")
    host = host.strip("[]").split("%")[0]
    return host, (int(port) if port.isdigit() else None)


def _parse_ss(line: str) -> Socket | None:
    """One line of `ss -Htnp` (with or without a state column)."""
    parts = line.split()
    if len(parts) < 4:
        return None
    if not parts[0][:1].isdigit():
        parts = parts[1:]   # the state column (ss -l prints it)
    local, peer = _split_hostport(parts[2]), _split_hostport(parts[3])
    process = " ".join(parts[4:])
    if local[1] is None:
        return None
    return Socket(local[0], local[1], peer[0], peer[1], process)


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.removeprefix("::ffff:")).is_loopback
    except ValueError:
        return addr == "localhost"


def _tc(*args: str, netns: str | None = None, check: bool = True) -> None:
    argv = ["tc", *args] if netns is None else ["ip", "netns", "exec", netns, "tc", *args]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {r.stderr.strip()}")


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of SUBNET_BASE that no route or address of this machine touches, chosen from the
    process id so that concurrent runs start apart."""
    used = []
    for line in _ip("-4", "route", "show", "table", "all").stdout.splitlines() + \
            _ip("-4", "-o", "addr").stdout.splitlines():
        for m in re.finditer(r"(\d+\.\d+\.\d+\.\d+)(?:/(\d+))?", line):
            try:
                used.append(ipaddress.ip_network(f"{m.group(1)}/{m.group(2) or 32}", strict=False))
            except ValueError:
                continue
    candidates = list(ipaddress.ip_network(SUBNET_BASE).subnets(new_prefix=24))
    start = os.getpid() % len(candidates)
    for k in range(len(candidates)):
        net = candidates[(start + k) % len(candidates)]
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise NetnsError(f"no free /24 left in {SUBNET_BASE}")


def sweep_stale() -> list[str]:
    """Remove namespaces and links left by test runs that were killed: those whose name prefix
    ("th" + a process id in hex) names no running process. Returns what was removed."""
    gone = []
    names = [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()]
    links = [m.group(1) for m in re.finditer(r"^\d+: ([^:@\s]+)", _ip("-o", "link").stdout, re.M)]
    for name in [*links, *names]:
        m = _STALE.match(name)
        if m is None or _alive(int(m.group(1), 16)):
            continue
        if name in names:
            _ip("netns", "del", name, check=False)
        else:
            _ip("link", "del", name, check=False)
        gone.append(name)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
