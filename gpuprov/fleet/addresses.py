"""A host's ``address``: an IPv4/IPv6 literal (no brackets) or an RFC 1123 DNS name that SSH can connect to.

A rejected address is never quoted in a message: the field is where ``user:password@host`` lands when an
SSH URL or a ``user@host`` login is pasted, so the message names the form that was written and where its
parts belong (the user in ``user:`` or ``ssh.user``, the port in ``port:``) instead. Addresses that parse
but name no single host SSH can reach (``0.0.0.0``, ``::``, ``255.255.255.255``, multicast) are refused.
:func:`address_key` gives one spelling per address for the duplicate check.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import PlainValidator

from gpuprov.fleet.types import fail, require_str

_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_USER_FIX = "the user goes in `user:` (or ssh.user for every host)"
_PORT_FIX = "the port in `port:` (or ssh.port for every host)"
#: IPv4 limited broadcast (RFC 919)
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


def check_address(value: object) -> str:
    """``value`` if it is an address SSH can connect to, else a ``fail`` error that does not quote it."""
    text = require_str(value, "an IP address or DNS name", "10.0.0.11 or gpu01.example.com")
    _refuse_other_forms(text)
    if ":" in text:
        try:
            ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv6Address(text)
        except ValueError:
            raise fail("not a valid IPv6 address (the value is not shown)",
                       "check the address: eight groups of hex digits, :: for one run of zero groups") from None
        _refuse_unusable(ip)
        return text
    labels = text.rstrip(".").split(".")
    if all(label.isdigit() for label in labels):
        try:
            ip = ipaddress.IPv4Address(text)
        except ValueError:
            raise fail("not a valid IPv4 address (the value is not shown)",
                       "use four numbers 0-255, e.g. 10.0.0.11") from None
        _refuse_unusable(ip)
        return text
    if len(text) > 253 or not all(_LABEL.match(label) for label in labels) or labels[-1].isdigit():
        raise fail("not a valid host name (RFC 1123; the value is not shown)",
                   "use letters, digits and - in dot-separated labels of at most 63 characters")
    return text


def _refuse_other_forms(text: str) -> None:
    """Refuse what is written in the shape of something else: a URL, user@host, host:port, a network."""
    if not text.strip():
        raise fail("the address is empty", "write the host's IP address or DNS name")
    if text != text.strip() or any(c.isspace() for c in text):
        raise fail("the address contains spaces", "write only the host's IP address or DNS name")
    if "://" in text:
        raise fail("a URL (scheme://...) is not an address; the value is not shown, as a URL can hold a password",
                   f"write only the host's IP address or DNS name; {_USER_FIX} and {_PORT_FIX}")
    if "@" in text:
        if ":" in text.rpartition("@")[0]:
            raise fail("the address holds credentials (user:password@host); the value is not shown",
                       f"write only the host; {_USER_FIX}, and hosts log in with an SSH key (`key:`): a password "
                       "never belongs in the fleet file")
        raise fail("the address has a user part (user@host)", f"write only the host; {_USER_FIX}")
    if text.startswith("["):
        inner, _, rest = text[1:].partition("]")
        if rest.startswith(":") and rest[1:].isdigit():
            raise fail("an IPv6 address in brackets with a port ([address]:port)",
                       f"write the address without brackets and put the port in `port: {int(rest[1:])}`")
        if not rest and _is_ipv6(inner):
            raise fail("the IPv6 address has brackets", f"write it without brackets: {inner}")
        raise fail("brackets belong to a URL or [address]:port, not to an address",
                   "write the IPv6 address without brackets")
    if text.count(":") == 1:
        port = text.partition(":")[2]
        fix = f"put the port in `port: {int(port)}`" if port.isdigit() and port.isascii() else _PORT_FIX
        raise fail("the address has a port (host:port)", f"write only the host in address and {fix}")
    if "/" in text:
        raise fail("an address with `/` is a network (address/prefix) or a path, not one host",
                   "write the host's own IP address or DNS name")


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _refuse_unusable(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    """Refuse addresses that name no single host (an IPv4-mapped IPv6 address is judged as its IPv4 address)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified:
        what = f"{ip} is the unspecified address (any address of this machine, no host)"
    elif ip == _BROADCAST:
        what = f"{ip} is the IPv4 broadcast address"
    elif ip.is_multicast:
        what = f"{ip} is a multicast address (a group of receivers, no host)"
    else:
        return
    raise fail(f"{what}: SSH cannot connect to it", "write the host's own unicast address or its DNS name")


def address_key(address: str) -> str:
    """An address in one spelling: ``fd00::1`` = ``FD00:0:0::0001``, ``::ffff:10.0.0.11`` = ``10.0.0.11`` (an
    IPv4-mapped IPv6 address reaches the same host), a DNS name in lower case without the final dot."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address.lower().rstrip(".")
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.compressed
    return ip.compressed


Address = Annotated[str, PlainValidator(check_address)]
