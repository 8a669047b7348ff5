"""lbweb/redirect.py: the URL plain HTTP is sent to (the whole server is driven over HTTP in test_https.py)."""

from __future__ import annotations

import pytest

from lbweb import redirect


@pytest.fixture
def port(monkeypatch):
    def set_port(value: int) -> None:
        monkeypatch.setattr(redirect, "PORT", value)

    return set_port


def test_same_host_and_path_on_the_https_port(port):
    port(8000)
    assert redirect.location("lb.example:8080", "/farms/3/", "q=a&b=1") == "https://lb.example:8000/farms/3/?q=a&b=1"
    assert redirect.location("198.18.0.10", "", "") == "https://198.18.0.10:8000/"
    assert redirect.location("[2001:2::10]:80", "/a b", "") == "https://[2001:2::10]:8000/a%20b"
    assert redirect.location("LB.Example", "/", "") == "https://lb.example:8000/"


def test_port_443_is_left_out(port):
    port(443)
    assert redirect.location("lb.example:80", "/x", "") == "https://lb.example/x"


@pytest.mark.parametrize("host", ["", "a b", "lb.example\r\nSet-Cookie: x=1", "evil.example/path", "user@lb.example"])
def test_a_host_header_that_is_not_a_plain_name_is_refused(host):
    assert redirect.location(host, "/", "") is None


def test_https_port_follows_lbweb_bind_unless_given(monkeypatch):
    monkeypatch.delenv("LBWEB_HTTPS_PORT", raising=False)
    monkeypatch.setenv("LBWEB_BIND", "0.0.0.0:9443")
    assert redirect.https_port() == 9443
    monkeypatch.setenv("LBWEB_HTTPS_PORT", "443")
    assert redirect.https_port() == 443


def test_the_wsgi_answer():
    seen = {}

    def start_response(status, headers):
        seen.update(status=status, headers=dict(headers))

    body = b"".join(
        redirect.application({"HTTP_HOST": "lb.example", "PATH_INFO": "/", "QUERY_STRING": ""}, start_response)
    )
    assert seen["status"] == "301 Moved Permanently" and seen["headers"]["Location"].startswith("https://lb.example")
    assert body.startswith(b"Moved to https://")
    redirect.application({"PATH_INFO": "/"}, start_response)
    assert seen["status"] == "400 Bad Request"
