"""Where a webhook may go: the URL parsed, its host resolved, every address checked, and
the one to connect to pinned (docs/api.md §2, §9).

The check runs at create time and again before every try, and the try connects to the
address that passed it, never to a second lookup's answer: a name that resolved to a
public address at create time and to 127.0.0.1 at delivery (DNS rebinding) is refused.
An address passes when it is global in `ipaddress`'s sense and not multicast; an IPv6
address that carries an IPv4 one (mapped, 6to4, Teredo, NAT64) must pass for that one
too. `JARVIS_WEBHOOK_ALLOW_PRIVATE=1` lifts the check, not the pinning.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

import httpx

from jarvis_agents.config import Settings
from jarvis_agents.errors import RequestError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# host, port → its addresses; the system's resolver by default, a fake one in tests.
Resolver = Callable[[str, int], Sequence[IPAddress]]

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The addresses the operating system resolves `host` to, in its order."""
    if _is_ip_literal(host):  # its own address: no resolver thread to wait for (gevent's)
        return [ipaddress.ip_address(host)]
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    # An IPv6 link-local answer may carry its zone ("fe80::1%eth0"); the check refuses it anyway.
    return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))


def is_public(address: IPAddress) -> bool:
    """Whether a webhook may reach `address` without the operator's leave."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None and not is_public(embedded):
            return False
    return address.is_global and not (
        address.is_multicast or address.is_private or address.is_loopback
        or address.is_link_local or address.is_reserved or address.is_unspecified
    )


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


@lru_cache(maxsize=1024)  # an agent's URL is parsed at its create and at each try
def parse_webhook_url(url: str) -> httpx.URL:
    """The URL parsed, or a RequestError: http(s), a host name or an IP literal (IPv6 in
    brackets), any port from 1 to 65535. (httpx.URL is immutable: one can be shared.)"""
    try:
        parts = urlsplit(url)  # strict about ports and brackets, where httpx is lenient
        port = parts.port
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        raise RequestError("webhook_url is not a valid URL", code="invalid_webhook_url") from None
    if parsed.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise RequestError("webhook_url must be an http(s) URL with a host",
                           code="invalid_webhook_url")
    host = parsed.raw_host.decode("ascii")  # IDNA-encoded
    if port == 0 or not (_is_ip_literal(host) or all(c.isalnum() or c in "-._" for c in host)):
        raise RequestError("webhook_url is not a valid URL", code="invalid_webhook_url")
    return parsed


@dataclass(frozen=True)
class Target:
    """Where one try goes: the URL with the checked address in place of the name, and
    what keeps the name for the receiver (Host header) and for TLS (server name)."""

    url: httpx.URL
    address: IPAddress
    host_header: str
    server_name: str | None  # None for an IP literal: no SNI, the certificate names the IP


def resolve_target(url: str, *, allow_private: bool, resolver: Resolver) -> Target:
    """Resolve the URL's host and check every address; raise RequestError if one may not
    be reached (code `webhook_url_not_allowed`) or the host does not resolve."""
    parsed = parse_webhook_url(url)
    host = parsed.raw_host.decode("ascii")  # IDNA-encoded; an IPv6 literal without brackets
    port = parsed.port or _DEFAULT_PORTS[parsed.scheme]
    try:
        addresses = list(resolver(host, port))
    except (OSError, UnicodeError, ValueError):
        addresses = []
    if not addresses:
        raise RequestError(f"webhook_url host {host!r} does not resolve",
                           code="invalid_webhook_url")
    if not allow_private:
        for address in addresses:
            if not is_public(address):
                raise RequestError(
                    f"webhook_url resolves to a non-public address ({address}); "
                    "the operator can allow this with JARVIS_WEBHOOK_ALLOW_PRIVATE=1",
                    code="webhook_url_not_allowed",
                )
    address = addresses[0]
    literal = _is_ip_literal(host)
    return Target(
        url=parsed.copy_with(host=str(address)),
        address=address,
        host_header=parsed.netloc.decode("ascii"),
        server_name=None if literal else host,
    )


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def check_webhook_url(
    url: str, settings: Settings, *, resolver: Resolver = system_resolver
) -> None:
    """Raise RequestError unless the URL may receive this deployment's webhooks (create time)."""
    if not settings.webhook_secret:
        raise RequestError(
            "webhooks are not enabled on this server (JARVIS_WEBHOOK_SECRET is not set)",
            code="webhooks_disabled",
        )
    if settings.webhook_allow_private:
        parse_webhook_url(url)  # any host; each try still resolves it and pins the address
    else:
        resolve_target(url, allow_private=False, resolver=resolver)
