"""Choice sets of the farms app (values are what the API and the compiler speak)."""

from django.db import models


class FarmProtocolChoices(models.TextChoices):
    TCP = "tcp", "TCP"
    UDP = "udp", "UDP"
    SCTP = "sctp", "SCTP"
    ALL = "all", "All protocols"


class FarmModeChoices(models.TextChoices):
    SNAT = "snat", "SNAT (backends see the load balancer)"
    DNAT = "dnat", "DNAT (backends see the client)"


class FarmSchedulerChoices(models.TextChoices):
    ROUND_ROBIN = "rr", "Round robin"
    WEIGHT = "weight", "Weighted"


class FarmStateChoices(models.TextChoices):
    UP = "up", "Up"
    OFF = "off", "Off"


class BackendStateChoices(models.TextChoices):
    ENABLED = "enabled", "Enabled"
    DISABLED = "disabled", "Disabled"


class ApplyStatusChoices(models.TextChoices):
    APPLIED = "applied", "Applied"
    PENDING = "pending", "Pending"
    FAILED = "failed", "Failed"


class ApplyKindChoices(models.TextChoices):
    INCREMENTAL = "incremental", "Incremental"
    FULL = "full", "Full resync"
    NOOP = "noop", "Nothing to change"
