"""Tests for gpuprov.fleet.addresses: what an address may be, and that a rejected one is never printed."""

from __future__ import annotations

import pytest
from pydantic_core import PydanticCustomError

from gpuprov.fleet.addresses import address_key, check_address


@pytest.mark.parametrize("address", ["10.0.0.11", "127.0.0.1", "fd00::11", "fe80::1%eth0", "::ffff:10.0.0.11",
                                     "gpu01", "gpu01.example.com", "gpu01.example.com."])
def test_addresses_ssh_can_reach_are_accepted(address: str) -> None:
    assert check_address(address) == address


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("admin:Pa55@10.0.0.11", "credentials"),
        ("admin:Pa55@fd00::11", "credentials"),
        ("ops@gpu01.example.com", "user@host"),
        ("ssh://ops:Pa55@gpu01:22", "URL"),
        ("https://gpu01.example.com/", "URL"),
        ("gpu01:2222", "host:port"),
        ("10.0.0.11:notaport", "host:port"),
        ("[fd00::11]:22", "[address]:port"),
        ("[fd00::11]", "brackets"),
        ("[gpu01]", "brackets"),
        ("10.0.0.0/24", "network"),
        ("gpu 01", "spaces"),
        ("   ", "empty"),
        ("fd00::11::12", "IPv6"),
        ("10.0.0.256", "IPv4"),
        ("gpu_01.example.com", "RFC 1123"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("::ffff:255.255.255.255", "broadcast"),
        ("224.0.0.251", "multicast"),
        ("ff05::2", "multicast"),
    ],
)
def test_other_forms_are_named_without_quoting_the_value(address: str, words: str) -> None:
    with pytest.raises(PydanticCustomError) as info:
        check_address(address)
    context = info.value.context or {}
    text = f"{context['problem']} - {context['fix']}"
    assert words in text
    assert "Pa55" not in text and "ops" not in text.replace("hosts", "")
    if words in ("credentials", "user@host", "URL", "host:port"):
        assert "`user:`" in text or "`port:" in text


@pytest.mark.parametrize(
    ("a", "b"),
    [("fd00::1", "FD00:0:0::0001"), ("::ffff:10.0.0.11", "10.0.0.11"), ("::FFFF:a00:b", "10.0.0.11"),
     ("GPU01.Example.com.", "gpu01.example.com")],
)
def test_one_host_has_one_key(a: str, b: str) -> None:
    assert address_key(a) == address_key(b)


def test_different_hosts_have_different_keys() -> None:
    assert address_key("::10.0.0.11") != address_key("10.0.0.11")  # IPv4-compatible is not IPv4-mapped
