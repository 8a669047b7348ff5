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
    DSR = "dsr", "DSR (layer 2, backends answer the client directly)"
    STATELESS_DNAT = "stlsdnat", "Stateless DNAT (UDP, no conntrack)"
    LOCAL = "local", "Local (a service on the appliance itself: filtered and limited, not forwarded)"
    HTTP = "http", "HTTP (HAProxy: routing by host and path)"
    HTTPS = "https", "HTTPS (HAProxy: TLS terminated, routing by host and path)"


L7_MODES = (FarmModeChoices.HTTP, FarmModeChoices.HTTPS)  # served by HAProxy (l7/), not by the kernel


class FarmSchedulerChoices(models.TextChoices):
    ROUND_ROBIN = "rr", "Round robin"
    WEIGHT = "weight", "Weighted"
    HASH = "hash", "Hash of chosen fields"
    SYMHASH = "symhash", "Symmetric hash"
    LEASTCONN = "leastconn", "Least connections"
    MAGLEV = "maglev", "Maglev consistent hash"


class HashFieldChoices(models.TextChoices):
    SRCIP = "srcip", "Source address"
    DSTIP = "dstip", "Destination address"
    SRCPORT = "srcport", "Source port"
    DSTPORT = "dstport", "Destination port"
    SRCMAC = "srcmac", "Source MAC"
    DSTMAC = "dstmac", "Destination MAC"


class PersistenceChoices(models.TextChoices):
    NONE = "", "None"
    SRCIP = "srcip", "Source address"
    SRCIP_SRCPORT = "srcip srcport", "Source address and port"
    SRCMAC = "srcmac", "Source MAC"


class LimitVerdictChoices(models.TextChoices):
    DROP = "drop", "Drop"
    REJECT = "reject", "Reject"


class HelperChoices(models.TextChoices):
    NONE = "", "None"
    FTP = "ftp", "FTP"
    TFTP = "tftp", "TFTP"
    SIP = "sip", "SIP"
    PPTP = "pptp", "PPTP"
    SNMP = "snmp", "SNMP"
    IRC = "irc", "IRC"
    AMANDA = "amanda", "Amanda"
    H323 = "h323", "H.323"


class PolicyTypeChoices(models.TextChoices):
    DENY = "deny", "Deny list"
    ALLOW = "allow", "Allow list"


class FarmStateChoices(models.TextChoices):
    UP = "up", "Up"
    OFF = "off", "Off"


class BackendStateChoices(models.TextChoices):
    ENABLED = "enabled", "Enabled"
    DRAIN = "drain", "Drain (only clients bound by persistence)"
    DISABLED = "disabled", "Disabled"


class BackendHealthChoices(models.TextChoices):
    # Health only: whether a backend takes traffic also depends on its state (the farm page says so apart).
    UNKNOWN = "unknown", "Unknown (not checked yet, or no check)"
    UP = "up", "Up"
    DOWN = "down", "Down"


class FarmAllDownChoices(models.TextChoices):
    REJECT = "reject", "Reject new connections (TCP reset, ICMP port unreachable)"
    FALLBACK = "fallback", "Send new connections to the fallback address"


class FarmTrafficChoices(models.TextChoices):
    BALANCED = "balanced", "Balanced over the active backends"
    FALLBACK = "fallback", "No active backend: sent to the fallback address"
    REJECTED = "rejected", "No active backend: rejected"
    LOCAL = "local", "Delivered to the service on the appliance itself"
    OFF = "off", "Farm off"


class HealthCheckTypeChoices(models.TextChoices):
    NONE = "none", "No check (backends always taken as healthy)"
    TCP = "tcp", "TCP connect"
    HTTP = "http", "HTTP request"
    HTTPS = "https", "HTTPS request"
    UDP = "udp", "UDP request and reply"
    ICMP = "icmp", "ICMP echo (ping)"
    COMMAND = "command", "Custom command"


class HttpMethodChoices(models.TextChoices):
    GET = "GET", "GET"
    HEAD = "HEAD", "HEAD"
    OPTIONS = "OPTIONS", "OPTIONS"
    POST = "POST", "POST"


class ApplyStatusChoices(models.TextChoices):
    APPLIED = "applied", "Applied"
    PENDING = "pending", "Pending"
    FAILED = "failed", "Failed"


class ApplyKindChoices(models.TextChoices):
    INCREMENTAL = "incremental", "Incremental"
    FULL = "full", "Full resync"
    NOOP = "noop", "Nothing to change"
    REPAIR = "repair", "Drift repaired"


class RateUnitChoices(models.TextChoices):
    """The units of nftlb's rates (``10/minute``), kept as they are: the kernel limits per each exactly."""

    SECOND = "second", "per second"
    MINUTE = "minute", "per minute"
    HOUR = "hour", "per hour"
    DAY = "day", "per day"
    WEEK = "week", "per week"
