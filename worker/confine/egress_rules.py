"""Where the egress proxy may connect: public addresses, never the worker's host or its networks.

The proxy judges the address a name resolves to, at connect time, and then connects to that
very address (not the name again), so every spelling of a refused address (`0x7f.1`,
`2130706433`, `127.1`, `[::ffff:127.0.0.1]`, `localhost.`) and a name that resolves to one
(DNS rebinding included) meets the same refusal.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Endpoint = tuple[str, int]  # (host in lower case, port)
# A resolved address to connect to: (family, sockaddr) as getaddrinfo gives them.
Target = tuple[socket.AddressFamily, Any]

# REQDRIVE_SANDBOX_NETWORK=registries: the package registries a repository's setup commonly
# needs, HTTPS only. Mirrors and private registries are added with REQDRIVE_SANDBOX_API_HOSTS.
REGISTRIES: dict[str, tuple[Endpoint, ...]] = {
    "PyPI": (("pypi.org", 443), ("files.pythonhosted.org", 443)),
    "npm": (("registry.npmjs.org", 443),),
    "Go module proxy": (("proxy.golang.org", 443), ("sum.golang.org", 443)),
    "crates.io": (("index.crates.io", 443), ("static.crates.io", 443)),
}
REGISTRY_ENDPOINTS: tuple[Endpoint, ...] = tuple(e for hosts in REGISTRIES.values() for e in hosts)

# Cloud instance metadata services (AWS/GCP/Azure, AWS over IPv6, ECS tasks, Alibaba): named in
# the refusal; each is refused anyway as link-local, private or not public.
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200")
)
# Kinds of address that are never the public internet, in the order a refusal names them.
# `is_private` covers 10/8, 172.16/12, 192.168/16, fc00::/7 and the documentation ranges;
# 100.64/10 (carrier-grade NAT) and deprecated fec0::/10 are caught as not global.
KINDS = (
    ("is_unspecified", "unspecified"),
    ("is_loopback", "loopback"),
    ("is_link_local", "link-local"),
    ("is_multicast", "multicast"),
    ("is_private", "private"),
    ("is_reserved", "reserved"),
    ("is_site_local", "site-local"),
)
# IPv6 prefixes whose last 32 bits are the IPv4 address the packet really goes to.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")


def host_addresses() -> frozenset[Address]:
    """Every address of this host's interfaces: a service listening on all of them (Redis on
    0.0.0.0) answers on each, a public one included."""
    # Imported here: the sandbox's own modules (the relay, the sweep run as another user) load
    # this file without the worker's site-packages.
    import psutil

    found: set[Address] = set()
    for addresses in psutil.net_if_addrs().values():
        for item in addresses:
            if item.family in (socket.AF_INET, socket.AF_INET6):
                found.add(ipaddress.ip_address(item.address.split("%")[0]))
    return frozenset(found)


def names_loopback(host: str) -> bool:
    """Whether an endpoint's host is the worker's loopback (a local model server)."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one leads to: mapped (::ffff:a.b.c.d), translated
    (::ffff:0:a.b.c.d), NAT64 (64:ff9b::a.b.c.d) or 6to4 (2002:aabb:ccdd::)."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64 or address in TRANSLATED:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal(address: Address, own: frozenset[Address]) -> str | None:
    """Why the proxy must not connect to this address; None for a public one."""
    plain = ipaddress.ip_address(str(address).split("%")[0])  # a scope id changes nothing
    if plain in own and not plain.is_loopback:
        return "an address of the worker's host"
    inner = embedded_ipv4(plain)
    if inner is not None:
        why = refusal(inner, own)
        return None if why is None else f"wraps {inner}, {why}"
    if plain in METADATA:
        return "cloud metadata"
    for attribute, kind in KINDS:
        if getattr(plain, attribute, False):
            return kind
    return None if plain.is_global else "not globally routable"


def public_targets(host: str, port: int, own: frozenset[Address]) -> tuple[list[Target], str]:
    """The addresses `host` resolves to that the proxy may connect to, and why the others are
    refused ("" when none is)."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:
        return [], f"cannot resolve it ({error})"
    targets: list[Target] = []
    refused: dict[str, None] = {}
    for family, _, _, _, sockaddr in found:
        address = ipaddress.ip_address(sockaddr[0])
        why = refusal(address, own)
        if why is None:
            targets.append((family, sockaddr))
        else:
            refused[f"{address} ({why})"] = None
    return targets, ", ".join(refused)


def connect_first(targets: list[Target], timeout_s: float) -> socket.socket:
    """A connection to the first of these addresses that answers; OSError if none does."""
    error: OSError = OSError("no address to connect to")
    for family, sockaddr in targets:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(sockaddr)
        except OSError as failed:
            sock.close()
            error = failed
            continue
        return sock
    raise error
