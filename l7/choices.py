"""Choice sets of the l7 app (values are what the API and the generator speak)."""

from django.db import models


class SchedulerChoices(models.TextChoices):
    ROUND_ROBIN = "roundrobin", "Round robin (weighted)"
    LEASTCONN = "leastconn", "Least connections"
    SOURCE = "source", "Hash of the client address"
    URI = "uri", "Hash of the URI"


class PersistenceChoices(models.TextChoices):
    NONE = "", "None"
    COOKIE = "cookie", "Cookie inserted by the LB"
    SOURCE = "source", "Client address"
    HEADER = "header", "A request header"


class CertificateSourceChoices(models.TextChoices):
    UPLOAD = "upload", "Uploaded"
    SELF_SIGNED = "selfsigned", "Self-signed"
    ACME = "acme", "ACME"
