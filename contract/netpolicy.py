"""Which addresses http_fetch may reach: no internal ones unless the setting lists their network.

Refused by default: loopback, private, link-local, multicast, reserved and unspecified
addresses, IPv4 and IPv6 (IPv4-mapped, 6to4 and NAT64 forms judged by the IPv4 address they
reach); the networks in BROKER_FETCH_ALLOWED_NETWORKS pass whatever they are. The broker asks
at enqueue about a URL whose host is an address literally; the worker asks about every address
a name resolves to, on the first request and on every redirect.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

from contract.conf import broker_settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
SETTING = "BROKER_FETCH_ALLOWED_NETWORKS"
# NAT64's well-known prefix (RFC 6052): its last 32 bits are the IPv4 address reached.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def allowed_networks() -> tuple[Network, ...]:
    """The networks of BROKER_FETCH_ALLOWED_NETWORKS, read now (override_settings works)."""
    return _networks(tuple(str(n) for n in broker_settings.BROKER_FETCH_ALLOWED_NETWORKS or ()))


@functools.lru_cache(maxsize=8)
def _networks(texts: tuple[str, ...]) -> tuple[Network, ...]:
    # strict=False: "10.1.2.3/8" means 10.0.0.0/8, as people tend to write it.
    return tuple(ipaddress.ip_network(t.strip(), strict=False) for t in texts if t.strip())


def refusal(address: Address, allowed: Iterable[Network] = ()) -> str | None:
    """Why `address` may not be fetched, as the task's error says it; None when it may be."""
    reached = [address, *_embedded(address)]
    if any(ip in net for ip in reached for net in allowed):
        return None
    for ip in reached:
        kind = _kind(ip)
        if kind:
            return f"refused: {_shown(address)} is {kind} address (not in {SETTING})"
    return None


def _shown(address: Address) -> str:
    # "::ffff:127.0.0.1", as people write it, not "::ffff:7f00:1".
    mapped = getattr(address, "ipv4_mapped", None)
    return f"::ffff:{mapped}" if mapped is not None else str(address)


def _embedded(address: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address reaches: mapped (::ffff:a.b.c.d), 6to4, NAT64."""
    if isinstance(address, ipaddress.IPv4Address):
        return []
    found = [address.ipv4_mapped, address.sixtofour]
    if address in _NAT64:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [ip for ip in found if ip is not None]


def _kind(ip: Address) -> str | None:
    v6 = ip if isinstance(ip, ipaddress.IPv6Address) else None
    if ip.is_unspecified:
        return "an unspecified"
    if ip.is_loopback:
        return "a loopback"
    if ip.is_link_local:
        return "a link-local"
    if ip.is_multicast:
        return "a multicast"
    if v6 is not None and v6.ipv4_mapped is not None:
        return None  # judged by the IPv4 address it maps to
    if ip.is_private or (v6 is not None and v6.is_site_local):
        return "a private"
    if ip.is_reserved:
        return "a reserved"
    if not ip.is_global:
        return "a non-public"  # say, 100.64.0.0/10 (carrier-grade NAT)
    return None


def literal_address(host: str) -> Address | None:
    """The address a URL's host names literally ("127.0.0.1", "::1", "2130706433"), or None.

    The legacy IPv4 forms ("127.1", "0x7f.1", "2130706433") count: the resolver reads them
    as the address they spell, not as a name.
    """
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if not host.isascii() or not host.replace(".", "").isalnum():
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def literal_refusal(host: Any) -> str | None:
    """refusal() of the address a URL's host names literally; None for a name or an allowed one."""
    address = literal_address(host) if isinstance(host, str) else None
    return refusal(address, allowed_networks()) if address is not None else None
