from django.urls import path
from rest_framework.routers import DefaultRouter

from .views import (
    ApplyRunViewSet,
    BackendViewSet,
    CapabilitiesView,
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

urlpatterns = [
    path("capabilities/", CapabilitiesView.as_view(), name="capabilities"),
    *router.urls,
]
