from django.db import models


class SyslogTransportChoices(models.TextChoices):
    UDP = "udp", "UDP (RFC 5426)"
    TCP = "tcp", "TCP (RFC 6587, octet-counted)"
    TLS = "tls", "TLS (RFC 5425)"
