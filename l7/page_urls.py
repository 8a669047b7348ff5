"""Pages of HTTP farms."""

from django.urls import path

from . import views

app_name = "l7"

urlpatterns = [path("", views.HttpFarmsView.as_view(), name="http_farms")]
