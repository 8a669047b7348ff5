from django.urls import path

from . import views

app_name = "network"

urlpatterns = [
    path("", views.NetworkView.as_view(), name="network"),
    path("interfaces/<int:pk>/", views.InterfaceEditView.as_view(), name="interface_edit"),
]
