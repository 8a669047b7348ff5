from django.urls import path
from rest_framework.routers import DefaultRouter

from .views import (
    ApplyRunViewSet,
    BackendViewSet,
    FarmViewSet,
    HealthCheckViewSet,
    HealthEventViewSet,
    HealthStatusView,
)

app_name = "farms-api"

router = DefaultRouter()
router.register("farms", FarmViewSet)
router.register("backends", BackendViewSet)
router.register("apply-runs", ApplyRunViewSet)
router.register("health-checks", HealthCheckViewSet)
router.register("health-events", HealthEventViewSet)

urlpatterns = [
    path("health-status/", HealthStatusView.as_view(), name="health-status"),
    *router.urls,
]
