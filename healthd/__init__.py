"""healthd: health checks of every backend (``manage.py healthd``)."""
