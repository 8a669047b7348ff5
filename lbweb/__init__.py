"""lbweb: the control plane of a kernel (nftables + conntrack) load balancer."""

from .celery import app as celery_app

__all__ = ("celery_app",)
