"""WSGI entry point (gunicorn lbweb.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lbweb.settings")

application = get_wsgi_application()
