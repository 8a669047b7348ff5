"""The Celery app: the worker on queue ``dataplane`` is the only process that changes the kernel."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lbweb.settings")

app = Celery("lbweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
