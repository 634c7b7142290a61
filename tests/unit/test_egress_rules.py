"""The egress proxy connects only to public addresses, however a refused one is spelled."""

from __future__ import annotations

import ipaddress

import pytest

from worker.confine.egress_rules import host_addresses, names_loopback, public_targets, refusal

OWN = frozenset({ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("203.0.113.7")})


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),  # noqa: S104 - an address judged, not bound
        ("::", "unspecified"),
        ("10.1.2.3", "private"),
        ("172.31.255.1", "private"),
        ("192.168.0.1", "private"),
        ("fd12:3456::1", "private"),
        ("100.64.0.1", "not globally routable"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fe80::1%2", "link-local"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("fec0::1", "site-local"),
        ("240.0.0.1", "private"),
        ("::7f00:1", "reserved"),  # IPv4-compatible, deprecated
        ("::ffff:127.0.0.1", "wraps 127.0.0.1, loopback"),
        ("::ffff:0:a00:1", "wraps 10.0.0.1, private"),
        ("64:ff9b::a9fe:a9fe", "wraps 169.254.169.254, cloud metadata"),
        ("2002:c0a8:101::1", "wraps 192.168.1.1, private"),
        ("203.0.113.7", "an address of the worker's host"),  # even were it public
        ("::ffff:203.0.113.7", "wraps 203.0.113.7, an address of the worker's host"),
    ],
)
def test_addresses_that_are_not_the_public_internet_are_refused(address: str, why: str) -> None:
    assert refusal(ipaddress.ip_address(address), OWN) == why


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "64:ff9b::808:808", "2002:808:808::1"]
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert refusal(ipaddress.ip_address(address), OWN) is None


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("localhost", "127.0.0.1 (loopback)"),
        ("0x7f.1", "127.0.0.1 (loopback)"),
        ("2130706433", "127.0.0.1 (loopback)"),
        ("127.1", "127.0.0.1 (loopback)"),
        ("0177.0.0.1", "127.0.0.1 (loopback)"),
        ("0", "0.0.0.0 (unspecified)"),
        ("::ffff:7f00:1", "::ffff:7f00:1 (wraps 127.0.0.1, loopback)"),
    ],
)
def test_every_spelling_of_loopback_resolves_to_a_refusal(host: str, why: str) -> None:
    targets, refused = public_targets(host, 6379, host_addresses())
    assert targets == []
    assert why in refused


def test_a_public_address_is_a_target_as_resolved() -> None:
    targets, why = public_targets("8.8.8.8", 443, frozenset())  # numeric: nothing is asked
    assert why == ""
    assert [sockaddr for _, sockaddr in targets] == [("8.8.8.8", 443)]


def test_the_hosts_own_addresses_include_its_loopback() -> None:
    assert ipaddress.ip_address("127.0.0.1") in host_addresses()


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("api.localhost", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("api.anthropic.com", False),
        ("10.0.0.1", False),
    ],
)
def test_a_model_api_on_the_workers_loopback_is_recognised(host: str, loopback: bool) -> None:
    assert names_loopback(host) is loopback
