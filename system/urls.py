from django.urls import path

from . import backup_views, views

app_name = "system"

urlpatterns = [
    path("tls/", views.CertificateView.as_view(), name="tls"),
    path("backup/", backup_views.BackupPageView.as_view(), name="backup"),
]
