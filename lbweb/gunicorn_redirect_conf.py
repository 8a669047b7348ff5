"""gunicorn's configuration of the HTTP-to-HTTPS redirect:
``gunicorn -c lbweb/gunicorn_redirect_conf.py lbweb.redirect:application``.

Plain HTTP on ``LBWEB_HTTP_BIND`` (default ``0.0.0.0:8080``), or the socket systemd hands over
(``LISTEN_FDS``). One worker with a few threads: every answer is a 301 computed from the request line.
"""

import os

bind = [os.environ.get("LBWEB_HTTP_BIND", "0.0.0.0:8080")]
worker_class = "gthread"
workers = 1
threads = 4
graceful_timeout = 5
keepalive = 2
accesslog = "-"
errorlog = "-"
proc_name = "lbweb-redirect"
# gunicorn 27 opens a control socket in $HOME by default: one path for both lbweb servers (they would
# take it from each other), a home that may be read-only (ProtectHome), and a feature lbweb does not use.
control_socket_disable = True
