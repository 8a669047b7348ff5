from django.urls import path

from . import views

app_name = "bgp"

urlpatterns = [
    path("", views.BgpPageView.as_view(), name="bgp"),
    path("settings/", views.BgpSettingsEditView.as_view(), name="settings_edit"),
    path("drain/", views.BgpDrainView.as_view(), name="drain"),
    path("peers/new/", views.BgpPeerEditView.as_view(), name="peer_add"),
    path("peers/<int:pk>/", views.BgpPeerEditView.as_view(), name="peer_edit"),
    path("peers/<int:pk>/delete/", views.BgpPeerDeleteView.as_view(), name="peer_delete"),
    path("farms/<int:farm_id>/", views.FarmAnnouncementEditView.as_view(), name="announcement_edit"),
]
