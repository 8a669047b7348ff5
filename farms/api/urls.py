from django.urls import path
from rest_framework.routers import DefaultRouter

from .views import (
    ApplyRunViewSet,
    AuditEventViewSet,
    BackendViewSet,
    CapabilitiesView,
    ConfigExportView,
    ConfigImportView,
    FarmViewSet,
    PolicyViewSet,
    StaticSessionViewSet,
)

app_name = "farms-api"

router = DefaultRouter()
router.register("farms", FarmViewSet)
router.register("backends", BackendViewSet)
router.register("policies", PolicyViewSet)
router.register("static-sessions", StaticSessionViewSet)
router.register("apply-runs", ApplyRunViewSet)
router.register("audit-events", AuditEventViewSet)

urlpatterns = [
    path("capabilities/", CapabilitiesView.as_view(), name="capabilities"),
    path("config/export/", ConfigExportView.as_view(), name="config-export"),
    path("config/import/", ConfigImportView.as_view(), name="config-import"),
    *router.urls,
]
