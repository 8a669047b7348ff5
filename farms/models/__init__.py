"""The farms app's models, one module per concern, all importable from here as before (``from farms.models
import Farm``; migrations name them ``farms.Farm``):

- ``configuration``: farms, the policies they share, the configuration generation;
- ``backends``: backends and static sessions;
- ``health``: health checks and the health transitions healthd recorded;
- ``records``: what the worker records (apply runs, kernel units and fingerprints, backend load);
- ``history``: the audit trail and the configuration versions.

Models import nothing above them (services, views, forms, the API, specs, audit: an import contract says so).
"""

from .backends import Backend, StaticSession
from .configuration import ConfigGeneration, Farm, Policy
from .health import HealthCheck, HealthEvent
from .history import AuditEvent, ConfigPart, ConfigVersion
from .records import ApplyRun, BackendLoad, KernelFingerprint, KernelUnit

__all__ = [
    "ApplyRun",
    "AuditEvent",
    "Backend",
    "BackendLoad",
    "ConfigGeneration",
    "ConfigPart",
    "ConfigVersion",
    "Farm",
    "HealthCheck",
    "HealthEvent",
    "KernelFingerprint",
    "KernelUnit",
    "Policy",
    "StaticSession",
]
