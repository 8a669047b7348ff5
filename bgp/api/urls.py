from django.urls import path
from rest_framework.routers import SimpleRouter

from .views import BgpDrainView, BgpPeerViewSet, BgpSettingsView, FarmAnnouncementView

app_name = "bgp-api"

router = SimpleRouter()
router.register("bgp/peers", BgpPeerViewSet)

urlpatterns = [
    path("bgp/", BgpSettingsView.as_view(), name="settings"),
    path("bgp/drain/", BgpDrainView.as_view(), name="drain"),
    path("bgp/farms/<int:farm_id>/", FarmAnnouncementView.as_view(), name="farm-announcement"),
    *router.urls,
]
