"""/api/v1/ routes of HTTP farms. Included before farms' API so /backends/{id}/capacity/ resolves here."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from . import api

app_name = "l7-api"

router = DefaultRouter()
router.register("certificates", api.CertificateViewSet)
router.register("http-services", api.HttpServiceViewSet)

urlpatterns = [
    path("backends/<int:backend_id>/capacity/", api.CapacityView.as_view(), name="backend-capacity"),
    path("backends/<int:backend_id>/capacity-token/", api.CapacityTokenView.as_view(), name="backend-capacity-token"),
    path("backends/<int:backend_id>/http/", api.L7BackendView.as_view(), name="backend-http"),
    path("farms/<int:farm_id>/http/", api.L7FarmView.as_view(), name="farm-http"),
    path("http/preview/", api.PreviewView.as_view(), name="preview"),
    *router.urls,
]
