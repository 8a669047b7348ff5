"""gunicorn's configuration of the web process: ``gunicorn -c lbweb/gunicorn_conf.py lbweb.wsgi``.

HTTPS on ``LBWEB_BIND`` (default ``0.0.0.0:8000``) with the certificate and key of
``$LBWEB_VAR_DIR/tls/`` (``manage.py ensure_tls`` makes them). Under systemd the listening socket comes
from socket activation instead: gunicorn's arbiter takes the sockets of ``LISTEN_FDS`` when
``LISTEN_PID`` is its own and then ignores ``bind``, so the web process needs no privilege for port 443.

Workers: ``gthread``, 2 processes x 8 threads by default (``LBWEB_WEB_WORKERS``, ``LBWEB_WEB_THREADS``).
A sync worker serves one request at a time, so two slow requests (a configuration import, a preview of
10,000 farms, a dashboard series) would stall every page and API call behind them; threads let the fast
ones through while the slow ones run. Two processes for the two cores of a small appliance (most of a
request's time is Python holding the GIL, so threads alone would use one core) and so that a crashed
worker leaves one serving while the master replaces it; eight threads each cover the page's own
parallel polls (farm list, dashboard) of several operators plus API clients without queueing. More
would mostly wait on SQLite's single writer.

Certificate replacement: gunicorn asks the ``ssl_context`` hook below for a context at every new TLS
connection; the hook keeps one context per worker and builds a new one when the files changed (inode,
size or modification time), so a certificate uploaded through the UI or the API is served from the next
handshake on, with no restart or reload. If the new files do not load (say the key was renamed into place
and the certificate not yet), the last good context stays in use and the load is tried again at the next
connection. Each worker also looks at the files every ``TLS_REFRESH_SECONDS`` on a thread of its own
(``post_worker_init``): "the last good context" is then the last complete pair installed, in every worker,
and not the pair a worker happened to load at its own last handshake. Without it a worker that had served
no handshake since an install fell back to the pair before it while a later install was half written.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import ssl
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lbweb.paths import tls_cert_path, tls_key_path  # noqa: E402 - after the path above

bind = [os.environ.get("LBWEB_BIND", "0.0.0.0:8000")]
worker_class = "gthread"
workers = int(os.environ.get("LBWEB_WEB_WORKERS", "2"))
threads = int(os.environ.get("LBWEB_WEB_THREADS", "8"))
# A stop (SIGTERM) lets requests in progress finish for up to this long.
graceful_timeout = 10
timeout = 60
keepalive = 5
accesslog = "-"
errorlog = "-"
proc_name = "lbweb-web"
# gunicorn 27 opens a control socket in $HOME by default: one path for both lbweb servers (they would
# take it from each other), a home that may be read-only (ProtectHome), and a feature lbweb does not use.
control_socket_disable = True
certfile = str(tls_cert_path())
keyfile = str(tls_key_path())

if not (os.path.exists(certfile) and os.path.exists(keyfile)):
    sys.exit(f"lbweb: no TLS certificate at {certfile} (and key): run `manage.py ensure_tls` first")

# A master killed outright (SIGKILL, OOM) is restarted by the supervisor at once: its socket may bind beside the
# old workers' (SO_REUSEPORT), and those workers finish what they serve and stop (SIGTERM when their master dies)
# instead of holding the port until they notice. Without both, the API was down ~25 s after `kill -9` of it.
# Not under systemd: there the socket is lbweb-web.socket's (LISTEN_FDS, read before this file's settings are
# used), and with reuse_port gunicorn ignores it and every worker binds LBWEB_BIND itself: port 443 would hang.
reuse_port = "LISTEN_FDS" not in os.environ
PR_SET_PDEATHSIG = 1


def post_fork(server, worker):
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


TLS_REFRESH_SECONDS = 0.5


def post_worker_init(worker):
    from gunicorn import sock

    def refresh() -> None:
        while True:
            time.sleep(TLS_REFRESH_SECONDS)
            # Loads the files into this worker's context when they changed; a pair that never loaded is
            # reported by the next handshake, which raises it.
            with contextlib.suppress(Exception):
                sock.ssl_context(worker.cfg)

    if worker.cfg.is_ssl:
        threading.Thread(target=refresh, name="lbweb-tls-refresh", daemon=True).start()


log = logging.getLogger("gunicorn.error")
_lock = threading.Lock()
_loaded: dict = {"signature": None, "context": None, "refused": None}  # refused: the files' last failed load


def _signature() -> tuple | None:
    try:
        stats = (os.stat(certfile), os.stat(keyfile))
    except OSError:
        return None
    return tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in stats)


def ssl_context(conf, default_ssl_context_factory):
    """The TLS context for a new connection: the cached one, or a fresh one when the files changed."""
    signature = _signature()
    with _lock:
        if signature != _loaded["signature"] or _loaded["context"] is None:
            try:
                context = default_ssl_context_factory()
            except (OSError, ssl.SSLError) as error:
                if _loaded["context"] is None:
                    raise
                if signature != _loaded["refused"]:  # once per state of the files, not at every retry
                    _loaded["refused"] = signature
                    log.warning("lbweb: new TLS files do not load (%s); still serving the previous certificate", error)
            else:
                context.minimum_version = ssl.TLSVersion.TLSv1_2
                _loaded.update(signature=signature, context=context)
        return _loaded["context"]
