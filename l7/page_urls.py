"""Pages of HTTP farms: the overview, and the edit pages of what the API edits."""

from django.urls import path

from . import views

app_name = "l7"

urlpatterns = [
    path("", views.HttpFarmsView.as_view(), name="http_farms"),
    path("certificates/add/", views.CertificateEditView.as_view(), name="certificate_add"),
    path("certificates/self-signed/", views.SelfSignedCertificateView.as_view(), name="certificate_self_signed"),
    path("certificates/<int:pk>/edit/", views.CertificateEditView.as_view(), name="certificate_edit"),
    path("certificates/<int:pk>/delete/", views.CertificateDeleteView.as_view(), name="certificate_delete"),
    path("farms/<int:farm>/options/", views.HttpOptionsEditView.as_view(), name="options_edit"),
    path("farms/<int:farm>/services/add/", views.HttpServiceEditView.as_view(), name="service_add"),
    path("services/<int:pk>/edit/", views.HttpServiceEditView.as_view(), name="service_edit"),
    path("services/<int:pk>/delete/", views.HttpServiceDeleteView.as_view(), name="service_delete"),
    path("backends/<int:pk>/options/", views.BackendOptionsEditView.as_view(), name="backend_options_edit"),
]
