"""gunicorn's settings for lbweb's web process (``gunicorn -c lbweb/gunicorn_conf.py lbweb.wsgi``)."""

import os

bind = [os.environ.get("LBWEB_BIND", "0.0.0.0:8000")]
workers = 2
accesslog = "-"
graceful_timeout = 5
