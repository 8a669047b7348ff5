"""The remote syslog servers: where rsyslog sends lbweb's events (``compiler/syslog/``), each with its kinds.

Every value ends up in rsyslog's configuration; ``clean()`` keeps each to what ``compiler.syslog.grammar`` allows, so
none can become a directive there (the generator refuses the rest again). The CA certificate is public: it is shown.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from accounts.validation import pem_certificates_problem
from compiler.syslog import grammar
from compiler.syslog import spec as kinds

from .choices import SyslogTransportChoices

# The model's boolean fields, by the kind of event (the RFC 5424 MSGID) each one sends.
KIND_FIELDS = {
    "audit": kinds.AUDIT,
    "apply_runs": kinds.APPLY,
    "health": kinds.HEALTH,
    "cluster": kinds.CLUSTER,
    "http_access": kinds.HTTP_ACCESS,
    "farm_log": kinds.FARM_LOG,
}
FIELDS = (
    "name",
    "enabled",
    "host",
    "port",
    "transport",
    "ca_certificate",
    "peer_name",
    *KIND_FIELDS,
)


class SyslogServer(models.Model):
    """One syslog server lbweb forwards to, over UDP, TCP or TLS, in RFC 5424."""

    name = models.CharField(max_length=40, unique=True, help_text="What the page and the audit trail call it.")
    enabled = models.BooleanField(default=True)
    host = models.CharField(max_length=253, help_text="The server's IP address or DNS name.")
    port = models.PositiveIntegerField(default=514, help_text="514 for UDP and TCP, 6514 for TLS.")
    transport = models.CharField(max_length=3, choices=SyslogTransportChoices, default=SyslogTransportChoices.UDP)
    ca_certificate = models.TextField(
        "CA certificate",
        blank=True,
        help_text="TLS: the CA (PEM) that signed the server's certificate. Required for TLS.",
    )
    peer_name = models.CharField(
        "certificate name",
        max_length=253,
        blank=True,
        help_text="TLS: the name the server's certificate must carry (*.example.org allowed). Blank: any name "
        "the CA signed.",
    )
    audit = models.BooleanField("audit trail", default=True, help_text="Who changed what (MSGID audit).")
    apply_runs = models.BooleanField("apply runs", default=True, help_text="Each apply and its result (apply).")
    health = models.BooleanField("health transitions", default=True, help_text="Backends going up or down (health).")
    cluster = models.BooleanField("cluster transitions", default=True, help_text="This node's HA state (cluster).")
    http_access = models.BooleanField(
        "HTTP access log", default=True, help_text="HAProxy's log line of each request to HTTP farms (http-access)."
    )
    farm_log = models.BooleanField(
        "farms' kernel log", default=True, help_text="The kernel's log lines of farms that log (farm-log)."
    )

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(kind for field, kind in KIND_FIELDS.items() if getattr(self, field))

    def audit_state(self) -> dict:
        return {name: getattr(self, name) for name in FIELDS}

    def clean(self) -> None:
        errors: dict[str, str] = {}
        for name, problem in (("host", grammar.host_problem), ("peer_name", grammar.peer_name_problem)):
            reason = problem(getattr(self, name) or "")
            if reason:
                errors[name] = reason
        reason = grammar.port_problem(self.port) if self.port is not None else None
        if reason:
            errors["port"] = reason
        if self.transport == SyslogTransportChoices.TLS:
            if not self.ca_certificate.strip():
                errors["ca_certificate"] = "TLS needs the CA that signed the server's certificate (PEM)."
            else:
                reason = pem_certificates_problem(self.ca_certificate)
                if reason:
                    errors["ca_certificate"] = reason
        else:
            if self.ca_certificate.strip():
                errors["ca_certificate"] = "Only for TLS: choose TLS, or leave this blank."
            if self.peer_name:
                errors["peer_name"] = "Only for TLS: choose TLS, or leave this blank."
        if errors:
            raise ValidationError(errors)
