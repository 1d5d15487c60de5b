"""Who a visitor is, for every per-visitor limit: the connection's address, or behind a trusted proxy the hop that
proxy appended to X-Forwarded-For, never a hop the client wrote.

``python -m pytest tests/public/test_visitors.py`` (a second). The live checks, with distinct loopback addresses as
distinct visitors, are in tests/public/test_admission.py.
"""

import asyncio
from dataclasses import replace
from types import SimpleNamespace

import pytest

from rloo_demo.public.admission import VISITOR_STATE, Admission
from rloo_demo.public.limits import LOCAL, PUBLIC, SPACE_PROXIES, Limits, visitor_address

PROXY = "10.16.3.7"  # where a Space's requests come from: Hugging Face's proxy, in a private network


def test_a_peer_that_is_no_trusted_proxy_is_the_visitor_whatever_it_forwards():
    """A caller from 127.0.0.2 with a forged header is keyed 127.0.0.2, even on a Space (its proxies are trusted,
    the caller is not one of them)."""
    for forwarded in ("9.9.9.9", "9.9.9.9, 8.8.8.8", ["1.1.1.1", "2.2.2.2"], "", None, "garbage"):
        assert visitor_address("127.0.0.2", forwarded, SPACE_PROXIES) == "127.0.0.2", forwarded
    assert visitor_address("10.0.0.7", "9.9.9.9", ()) == "10.0.0.7"  # nothing trusted: the header counts for nothing
    assert visitor_address(None, "9.9.9.9", SPACE_PROXIES) is None


def test_behind_a_trusted_proxy_the_rightmost_hop_that_is_no_proxy_is_the_visitor():
    assert visitor_address(PROXY, "198.51.100.5", SPACE_PROXIES) == "198.51.100.5"
    assert visitor_address(PROXY, " 1.1.1.1 ,\t 2.2.2.2,  198.51.100.5  ", SPACE_PROXIES) == "198.51.100.5"
    # a chain of our own proxies is walked past: the hop the first of them appended is the visitor
    assert visitor_address(PROXY, "198.51.100.5, 10.0.0.2, 172.16.0.9", SPACE_PROXIES) == "198.51.100.5"
    assert visitor_address(PROXY, "2001:db8::1", SPACE_PROXIES) == "2001:db8::/64"  # an IPv6 visitor by its /64
    # the header sent twice (a proxy that adds a line of its own): read in order, as one list
    assert visitor_address(PROXY, ["203.0.113.9", "198.51.100.5"], SPACE_PROXIES) == "198.51.100.5"


def test_an_ipv6_visitor_is_its_64_block_and_an_ipv4_one_its_address():
    """One host is given a whole /64 to use as it likes: rotating its addresses through it makes no new visitor,
    a neighbouring /64 is someone else. IPv4 written as IPv6 is the IPv4 visitor. Directly and behind a proxy."""
    from rloo_demo.public.limits import visitor_key

    block = {visitor_address(f"2001:db8:1:2:{i:x}::{i:x}", None, ()) for i in range(1, 50)}
    assert block == {"2001:db8:1:2::/64"}
    assert visitor_address("2001:db8:1:3::1", None, ()) == "2001:db8:1:3::/64"
    assert visitor_address("2001:DB8:1:2:0:0:0:1", None, ()) == "2001:db8:1:2::/64"  # however it is written
    assert visitor_address(PROXY, "2001:db8:1:2:ffff::7", SPACE_PROXIES) == "2001:db8:1:2::/64"
    assert visitor_address("::ffff:198.51.100.5", None, ()) == "198.51.100.5"
    assert visitor_address("198.51.100.5", None, ()) == "198.51.100.5"
    assert visitor_key(None) is None and visitor_key("testclient") == "testclient"  # not an address: as it is


def test_a_forged_left_part_changes_nothing():
    """The client writes what stands left of the proxy's hop: rotating it (the old bypass, which rotated the last
    hop where no proxy stood) leaves the visitor the same."""
    keys = {visitor_address(PROXY, f"203.0.113.{i}, 10.0.0.{i}, 198.51.100.5", SPACE_PROXIES) for i in range(20)}
    assert keys == {"198.51.100.5"}


def test_a_header_the_proxy_did_not_write_falls_back_to_the_peer():
    for forwarded in ("", "1.1.1.1,", "1.1.1.1, not-an-address", " , ", "10.0.0.2, 10.0.0.3"):
        assert visitor_address(PROXY, forwarded, SPACE_PROXIES) == PROXY, forwarded


def test_the_trusted_networks_come_from_the_environment_checked():
    assert Limits.from_env({}).trusted_proxies == () and LOCAL.trusted_proxies == PUBLIC.trusted_proxies == ()
    assert Limits.from_env({"RLOO_PUBLIC": "1"}).trusted_proxies == ()  # the image run elsewhere: no proxy known
    assert Limits.from_env({"SPACE_ID": "someone/rloo-demo"}).trusted_proxies == SPACE_PROXIES
    own = {"SPACE_ID": "someone/rloo-demo", "RLOO_TRUSTED_PROXIES": " 10.1.0.0/16, 127.0.0.1 "}
    assert Limits.from_env(own).trusted_proxies == ("10.1.0.0/16", "127.0.0.1")
    assert Limits.from_env(own | {"RLOO_TRUSTED_PROXIES": ""}).trusted_proxies == ()  # set empty: none
    for never in ("0", "false", "off", " no "):  # the old switch still means "never believe the header"
        assert Limits.from_env(own | {"RLOO_TRUST_FORWARDED": never}).trusted_proxies == ()
    assert Limits.from_env({"RLOO_TRUST_FORWARDED": "1"}).trusted_proxies == ()  # no longer trusts anyone
    with pytest.raises(SystemExit, match="RLOO_TRUSTED_PROXIES"):
        Limits.from_env({"RLOO_TRUSTED_PROXIES": "10.0.0.0/33"})


def _request(peer, forwarded=None, state=None):
    headers = {"x-forwarded-for": forwarded} if forwarded is not None else {}
    return SimpleNamespace(headers=headers, client=SimpleNamespace(host=peer), state=state)


def test_caller_of_reads_the_address_the_way_the_middleware_does(monkeypatch):
    from rloo_demo.ui.common import caller_of

    monkeypatch.setenv("SPACE_ID", "someone/rloo-demo")  # as on a Space, where the header used to be believed
    monkeypatch.delenv("RLOO_TRUSTED_PROXIES", raising=False)
    monkeypatch.delenv("RLOO_TRUST_FORWARDED", raising=False)
    assert caller_of(_request("127.0.0.2", "9.9.9.9"), "c").host == "127.0.0.2"
    assert caller_of(_request(PROXY, "9.9.9.9, 198.51.100.5"), "c").host == "198.51.100.5"
    # on a live server the middleware's reading, stamped on the request, is the one used
    stamped = SimpleNamespace(**{VISITOR_STATE: "198.51.100.77"})
    assert caller_of(_request(PROXY, "9.9.9.9", state=stamped), "c").host == "198.51.100.77"


def _through_middleware(limits, peer, headers):
    """The scope the app behind the middleware sees for one request."""
    seen = {}

    async def app(scope, receive, send):
        seen.update(scope)

    middleware = Admission(app, limits=limits, kind_of=lambda *a: None, queued=lambda *a: 0)
    scope = {"type": "http", "method": "GET", "path": "/", "client": (peer, 5000), "headers": headers}
    asyncio.run(middleware(scope, None, None))
    return seen


def test_the_middleware_stamps_the_same_visitor_caller_of_would_read():
    """One reading of who is asking: the middleware (admission) and the handlers (caller_of) agree, including
    for a header sent twice, which a dict of headers would have cut to its first line."""
    from starlette.requests import Request

    from rloo_demo.ui.common import caller_of

    limits = replace(PUBLIC, trusted_proxies=SPACE_PROXIES)
    raw = [(b"x-forwarded-for", b"203.0.113.1"), (b"x-forwarded-for", b"198.51.100.5")]
    for peer, headers, expected in (
        ("127.0.0.2", [(b"x-forwarded-for", b"9.9.9.9")], "127.0.0.2"),
        (PROXY, raw, "198.51.100.5"),
        (PROXY, [(b"x-forwarded-for", b"9.9.9.9, 198.51.100.6")], "198.51.100.6"),
    ):
        scope = _through_middleware(limits, peer, headers)
        assert scope["state"][VISITOR_STATE] == expected
        assert caller_of(Request(scope), "c").host == expected
