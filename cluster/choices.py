from django.db import models


class RoleChoices(models.TextChoices):
    """A node's VRRP state as its transition handler last recorded it (``dataplane.cluster.transition``)."""

    UNKNOWN = "unknown", "Unknown"
    MASTER = "master", "Master"
    BACKUP = "backup", "Backup"
    FAULT = "fault", "Fault"
    STOPPED = "stop", "Stopped"


class VrrpVersionChoices(models.IntegerChoices):
    V2 = 2, "VRRPv2 (whole seconds, optional password)"
    V3 = 3, "VRRPv3 (sub-second adverts, no authentication)"
