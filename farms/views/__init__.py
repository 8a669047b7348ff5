"""Server-rendered pages of the farms app, one module per kind of object (farms, backends, policies, the
logs, the configuration's documents and versions, health checks); ``page_parts`` holds what a farm's page
shows, shared by the views that render it.

Reads are open to every role; configuration changes need the admin role, backend states the operator
role (:mod:`farms.roles`). Every edit page validates with the model's ``clean()`` through a ModelForm
and can show the exact nftables change before saving ("Preview"); every write calls a service with
the user as ``actor``, so it lands in the audit trail.
"""

from .backend_views import (
    BackendBulkStateView,
    BackendCutView,
    BackendDeleteView,
    BackendEditView,
    BackendStateView,
    FarmBackendsEditView,
)
from .document_views import ConfigExportView, ConfigView, DocumentImportView, NftlbImportPageView
from .farm_views import FarmDeleteView, FarmDetailView, FarmEditView, FarmListView, FarmRetryView
from .health_check_views import HealthCheckEditView
from .log_views import ApplyRunListView, AuditEventListView
from .page_parts import farm_page_context, state_actions
from .policy_views import PolicyDeleteView, PolicyEditView, PolicyListView
from .version_views import ConfigVersionDiffView, ConfigVersionListView, ConfigVersionRestoreView

__all__ = [
    "ApplyRunListView",
    "AuditEventListView",
    "BackendBulkStateView",
    "BackendCutView",
    "BackendDeleteView",
    "BackendEditView",
    "BackendStateView",
    "ConfigExportView",
    "ConfigVersionDiffView",
    "ConfigVersionListView",
    "ConfigVersionRestoreView",
    "ConfigView",
    "DocumentImportView",
    "FarmBackendsEditView",
    "FarmDeleteView",
    "FarmDetailView",
    "FarmEditView",
    "FarmListView",
    "FarmRetryView",
    "HealthCheckEditView",
    "NftlbImportPageView",
    "PolicyDeleteView",
    "PolicyEditView",
    "PolicyListView",
    "farm_page_context",
    "state_actions",
]
