from django.urls import path

from . import views

app_name = "system"

urlpatterns = [
    path("tls/", views.CertificateView.as_view(), name="tls"),
]
