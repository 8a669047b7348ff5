"""The benchmark's servers: nginx and dnsmasq on each backend, HAProxy in the LB namespace (all from Debian).

Every server runs in the foreground inside a namespace of the lab, with its configuration, pid
file and logs in the bench's own work directory; nothing is written to /etc or /var.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

BODY = "lbweb bench: {name}\n"  # a small fixed body (under 30 bytes), one per backend

# What every nginx of the benches shares: foreground, files in its own directory, no logs, long keep-alive.
NGINX_HEAD = """\
daemon off;
master_process on;
worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_requests 10000000;
"""

NGINX_CONF = (
    NGINX_HEAD.replace("{workers}", "1")
    + """\
    keepalive_timeout 120s;
    server {{
        listen 80 backlog=8192;
        listen [::]:80 backlog=8192;
        location / {{
            default_type text/plain;
            return 200 "{body}";
        }}
    }}
}}
"""
)

HAPROXY_CONF = """\
global
    maxconn 8000
    pidfile {dir}/haproxy.pid
    log stderr format short local0 err

defaults
    mode tcp
    log global
    timeout connect 5s
    timeout client 60s
    timeout server 60s

listen bench
    bind {vip}:{port}
    balance roundrobin
    source {source}
{servers}
"""


def _popen(netns: str, args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(["ip", "netns", "exec", netns, *args], stdout=out, stderr=subprocess.STDOUT)


def nginx_starter(workdir: Path):
    """A ``backend_server`` for :class:`tests.support.lab.Lab`: one single-worker nginx per backend on port 80."""

    def start(netns: str, name: str) -> subprocess.Popen:
        directory = Path(workdir) / f"nginx-{name}"
        directory.mkdir(parents=True, exist_ok=True)
        conf = directory / "nginx.conf"
        conf.write_text(NGINX_CONF.format(dir=directory, body=BODY.format(name=name).replace("\n", "\\n")))
        return _popen(netns, ["nginx", "-p", str(directory), "-c", str(conf)], directory / "stdout.log")

    return start


DNS_NAME = "bench.lbweb.test"  # the one name the bench's DNS servers answer (an A record)


def start_dnsmasq(netns: str, workdir: Path, name: str, answer: str, port: int = 53) -> subprocess.Popen:
    """dnsmasq (Debian's dnsmasq-base) as a small DNS responder: UDP and TCP ``port`` on every address of
    ``netns``, an A record ``answer`` for :data:`DNS_NAME` and nothing else (no upstream, no hosts file,
    no system configuration). It answers from the address a query was sent to; logs stay in ``workdir``."""
    directory = Path(workdir) / f"dnsmasq-{name}-{port}"
    directory.mkdir(parents=True, exist_ok=True)
    args = ["dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", f"--port={port}"]
    args += [f"--address=/{DNS_NAME}/{answer}", "--user=root", f"--pid-file={directory / 'dnsmasq.pid'}"]
    args += [f"--log-facility={directory / 'dnsmasq.log'}"]
    return _popen(netns, args, directory / "stdout.log")


def start_haproxy(netns: str, workdir: Path, vip: str, port: int, backends: list[str], source: str) -> subprocess.Popen:
    """HAProxy in tcp mode on ``vip:port``, round robin over ``backends``, connecting from ``source``.

    The caller puts ``vip`` and ``source`` on the LB."""
    directory = Path(workdir) / "haproxy"
    directory.mkdir(parents=True, exist_ok=True)
    servers = "\n".join(f"    server b{i} {address}:{port}" for i, address in enumerate(backends, 1))
    conf = directory / "haproxy.cfg"
    conf.write_text(HAPROXY_CONF.format(dir=directory, vip=vip, port=port, servers=servers, source=source))
    subprocess.run(["haproxy", "-c", "-q", "-f", str(conf)], check=True)
    return _popen(netns, ["haproxy", "-db", "-f", str(conf)], directory / "haproxy.log")


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
