"""gunicorn's settings for lbweb's web process (``gunicorn -c lbweb/gunicorn_conf.py lbweb.wsgi``)."""

import ctypes
import os
import signal

bind = [os.environ.get("LBWEB_BIND", "0.0.0.0:8000")]
workers = 2
accesslog = "-"
graceful_timeout = 5
# A master killed outright (SIGKILL, OOM) is restarted by the supervisor at once: its socket may bind beside the
# old workers' (SO_REUSEPORT), and those workers finish what they serve and stop (SIGTERM when their master dies)
# instead of holding the port until they notice. Without both, the API was down ~25 s after `kill -9` of it.
reuse_port = True
PR_SET_PDEATHSIG = 1


def post_fork(server, worker):
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
