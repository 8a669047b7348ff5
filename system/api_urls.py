from django.urls import path

from . import api

app_name = "system-api"

urlpatterns = [
    path("auth/login/", api.TokenLoginView.as_view(), name="auth-login"),
    path("auth/logout/", api.TokenLogoutView.as_view(), name="auth-logout"),
    path("auth/logoutall/", api.TokenLogoutAllView.as_view(), name="auth-logoutall"),
    path("auth/tokens/", api.TokenListView.as_view(), name="auth-tokens"),
    path("auth/tokens/<str:token_key>/", api.TokenRevokeView.as_view(), name="auth-token"),
    path("system/backup/", api.BackupView.as_view(), name="backup"),
    path("system/backup/restore/", api.BackupRestoreView.as_view(), name="backup-restore"),
    path("system/backup/schedule/", api.BackupScheduleView.as_view(), name="backup-schedule"),
    path("system/tls-certificate/", api.CertificateView.as_view(), name="tls-certificate"),
]
