"""Whether a host name only reaches this machine: asked by ``lockgate serve`` before it
serves without tokens, and by the console of a request's ``Host``."""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost", "ip6-loopback"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` only reaches this machine (a wildcard such as 0.0.0.0 does not)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
