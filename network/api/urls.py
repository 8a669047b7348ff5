from django.urls import path
from rest_framework.routers import DefaultRouter

from .views import AddressViewSet, InterfaceViewSet, NetworkObservedView, NetworkSettingsView, RouteViewSet

app_name = "network-api"

router = DefaultRouter()
router.register("interfaces", InterfaceViewSet)
router.register("addresses", AddressViewSet)
router.register("routes", RouteViewSet)

urlpatterns = [
    path("settings/", NetworkSettingsView.as_view(), name="settings"),
    path("observed/", NetworkObservedView.as_view(), name="observed"),
    *router.urls,
]
