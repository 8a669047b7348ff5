from django.urls import path
from rest_framework.routers import DefaultRouter

from .nftlb import NftlbExportView, NftlbImportView
from .versions import ConfigVersionViewSet
from .views import (
    ApplyRunViewSet,
    AuditEventViewSet,
    BackendViewSet,
    CapabilitiesView,
    ConfigExportView,
    ConfigImportView,
    FarmViewSet,
    HealthCheckViewSet,
    HealthEventViewSet,
    HealthStatusView,
    PolicyViewSet,
    StaticSessionViewSet,
    StatusView,
)

app_name = "farms-api"

router = DefaultRouter()
router.register("farms", FarmViewSet)
router.register("backends", BackendViewSet)
router.register("policies", PolicyViewSet)
router.register("static-sessions", StaticSessionViewSet)
router.register("apply-runs", ApplyRunViewSet)
router.register("health-checks", HealthCheckViewSet)
router.register("health-events", HealthEventViewSet)
router.register("audit-events", AuditEventViewSet)
router.register("config-versions", ConfigVersionViewSet)

urlpatterns = [
    path("health-status/", HealthStatusView.as_view(), name="health-status"),
    path("status/", StatusView.as_view(), name="status"),
    path("capabilities/", CapabilitiesView.as_view(), name="capabilities"),
    path("nftlb/import/", NftlbImportView.as_view(), name="nftlb-import"),
    path("nftlb/export/", NftlbExportView.as_view(), name="nftlb-export"),
    path("config/export/", ConfigExportView.as_view(), name="config-export"),
    path("config/import/", ConfigImportView.as_view(), name="config-import"),
    *router.urls,
]
