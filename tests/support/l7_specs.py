"""Engine specs for the L7 tests: a farm of every kind the generator writes (golden files, ``haproxy -c``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from compiler.haproxy.spec import (
    CertificateSpec,
    EngineSpec,
    FarmSpec,
    HeaderRule,
    RedirectRule,
    ServerSpec,
    ServiceSpec,
)

FIXTURES = Path(__file__).parent / "fixtures" / "l7"


def http_farm() -> FarmSpec:
    return FarmSpec(
        id=1,
        name="web",
        mode="http",
        vip="198.18.100.1",
        ports=(80, 8080),
        services=(
            ServiceSpec(
                id=10,
                name="api",
                hosts=("api.example.com",),
                path_prefix="/v1",
                scheduler="leastconn",
                persistence="header",
                persistence_header="X-Session",
                persistence_ttl=600,
                servers=(ServerSpec(101, "198.18.1.11", 8080, capacity=8), ServerSpec(102, "198.18.1.12", 8080)),
                headers=(HeaderRule("request", "X-Service", "api"),),
            ),
            ServiceSpec(
                id=11,
                name="wild",
                hosts=("*.example.com", "www.example.org"),
                scheduler="source",
                persistence="source",
                persistence_ttl=300,
                servers=(ServerSpec(103, "2001:2:0:1::13", 80, weight=3, priority=2),),
            ),
            ServiceSpec(
                id=12,
                name="default",
                scheduler="roundrobin",
                persistence="cookie",
                persistence_ttl=3600,
                servers=(
                    ServerSpec(104, "198.18.1.11", 80, weight=2),
                    ServerSpec(105, "198.18.1.12", 80, state="drain"),
                    ServerSpec(106, "198.18.1.13", 80, healthy=False),
                ),
            ),
        ),
        redirects=(RedirectRule("/old", "https://www.example.com/new", 301), RedirectRule("/x", "/y", 302, True)),
        headers=(
            HeaderRule("request", "X-Lb", 'lbweb 100% "quoted"'),
            HeaderRule("request", "X-Remove-Me"),
            HeaderRule("response", "Server"),
        ),
        error_pages=((503, "<h1>Sorry, back soon</h1>"),),
    )


def https_farm() -> FarmSpec:
    return FarmSpec(
        id=2,
        name="secure",
        mode="https",
        vip="2001:2:0:100::2",
        ports=(443,),
        redirect_ports=(80,),
        hsts_max_age=31536000,
        certificates=(
            CertificateSpec(1, "example", (FIXTURES / "example.pem").read_text(), ("www.example.com", "example.com")),
            CertificateSpec(2, "api", (FIXTURES / "api.pem").read_text(), ("api.example.org",)),
        ),
        services=(
            ServiceSpec(
                id=20,
                name="regex",
                host_regex=r"^(www\.)?example\.com$",
                scheduler="uri",
                reuse=False,
                servers=(ServerSpec(201, "198.18.1.11", 443, tls=True, tls_sni="www.example.com"),),
            ),
            ServiceSpec(
                id=21,
                name="app",
                scheduler="roundrobin",
                servers=(ServerSpec(202, "198.18.1.12", 443, tls=True, tls_verify=True),),
            ),
        ),
    )


def full() -> EngineSpec:
    return EngineSpec(
        farms=(http_farm(), https_farm(), FarmSpec(3, "off", "http", "198.18.100.3", (80,), enabled=False))
    )


def edge() -> EngineSpec:
    """A farm with every option of issue 43's parts 3 and 4: slow start, passive health, retries and redispatch,
    PROXY v2 to backends, the PROXY protocol accepted from trusted sources (on TLS and redirect ports too)."""
    https = https_farm()
    return EngineSpec(
        farms=(
            FarmSpec(
                id=4,
                name="edge",
                mode="http",
                vip="198.18.100.4",
                ports=(80,),
                retry_on=("conn-failure", "empty-response", "503"),
                retries=2,
                redispatch=True,
                accept_proxy=True,
                proxy_trusted=("198.18.0.9/32", "2001:2::/64"),
                services=(
                    ServiceSpec(
                        id=40,
                        name="app",
                        servers=(
                            ServerSpec(401, "198.18.1.11", 80, slowstart=30, passive_errors=5),
                            ServerSpec(402, "198.18.1.12", 80, send_proxy=True, passive_errors=10, capacity=4),
                            ServerSpec(403, "198.18.1.13", 443, send_proxy=True, tls=True, slowstart=10),
                        ),
                    ),
                ),
            ),
            FarmSpec(
                id=5, name="connect-only", mode="http", vip="198.18.100.5", ports=(80,), retry_on=("conn-failure",),
                services=(ServiceSpec(50, "a", servers=(ServerSpec(501, "198.18.1.11", 80),)),),
            ),
            dataclasses.replace(https, id=6, name="secure-edge", accept_proxy=True, proxy_trusted=("198.18.0.0/24",)),
        )
    )  # fmt: skip
