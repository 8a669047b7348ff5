"""The site's URLs. A path under /api/ that names nothing answers 404 in JSON, like the API's own 404s."""

from csp.constants import SELF, UNSAFE_INLINE
from csp.decorators import csp_update
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import JsonResponse
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from accounts import views as accounts_views
from monitoring import views as monitoring_views

urlpatterns = [
    path("", include("farms.urls")),
    path("accounts/login/", accounts_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("", include("accounts.urls")),
    path("oidc/", include("mozilla_django_oidc.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/metrics/", include("monitoring.api.urls")),
    path("api/v1/network/", include("network.api.urls")),
    path("api/v1/system/authentication/", include("accounts.api.urls")),
    path("api/v1/system/", include("remotelog.api.urls")),
    path("api/v1/", include("system.api_urls")),
    path("api/v1/", include("cluster.api.urls")),
    path("cluster/", include("cluster.urls")),
    path("api/v1/", include("l7.urls")),
    path("api/v1/", include("farms.api.urls")),
    path("monitoring/", include("monitoring.urls")),
    path("http/", include("l7.page_urls")),
    path("metrics", monitoring_views.prometheus_metrics, name="prometheus-metrics"),
    path("system/network/", include("network.urls")),
    path("system/syslog/", include("remotelog.urls")),
    path("system/", include("system.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="schema", template_name="api_docs/swagger_ui.html"),
        name="api-docs",
    ),
    path(
        "api/redoc/",
        # Redoc renders with styled-components (<style> elements it makes) and parses in a blob: worker;
        # the exception holds for this page only, which shows nothing but the schema.
        csp_update({"style-src": [UNSAFE_INLINE], "worker-src": [SELF, "blob:"]})(
            SpectacularRedocView.as_view(url_name="schema", template_name="api_docs/redoc.html")
        ),
        name="api-redoc",
    ),
]


def not_found(request, exception=None):
    """API clients parse every answer as JSON (the schema says so); pages keep Django's HTML 404."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


handler404 = not_found
