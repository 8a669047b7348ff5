from django.urls import path

from . import views

app_name = "farms"

urlpatterns = [
    path("", views.FarmListView.as_view(), name="farm_list"),
    path("farms/add/", views.FarmEditView.as_view(), name="farm_add"),
    path("farms/<int:pk>/", views.FarmDetailView.as_view(), name="farm_detail"),
    path("farms/<int:pk>/edit/", views.FarmEditView.as_view(), name="farm_edit"),
    path("farms/<int:pk>/delete/", views.FarmDeleteView.as_view(), name="farm_delete"),
    path("farms/<int:pk>/retry/", views.FarmRetryView.as_view(), name="farm_retry"),
    path("farms/<int:farm_pk>/backends/add/", views.BackendEditView.as_view(), name="backend_add"),
    path("farms/<int:pk>/backends/", views.FarmBackendsEditView.as_view(), name="farm_backends"),
    path("farms/<int:pk>/backends/state/", views.BackendBulkStateView.as_view(), name="backend_bulk_state"),
    path("farms/<int:farm_pk>/health-check/", views.HealthCheckEditView.as_view(), name="healthcheck_edit"),
    path("backends/<int:pk>/edit/", views.BackendEditView.as_view(), name="backend_edit"),
    path("backends/<int:pk>/delete/", views.BackendDeleteView.as_view(), name="backend_delete"),
    path("backends/<int:pk>/state/", views.BackendStateView.as_view(), name="backend_state"),
    path("backends/<int:pk>/cut/", views.BackendCutView.as_view(), name="backend_cut"),
    path("policies/", views.PolicyListView.as_view(), name="policy_list"),
    path("policies/add/", views.PolicyEditView.as_view(), name="policy_add"),
    path("policies/<int:pk>/edit/", views.PolicyEditView.as_view(), name="policy_edit"),
    path("policies/<int:pk>/delete/", views.PolicyDeleteView.as_view(), name="policy_delete"),
    path("apply-runs/", views.ApplyRunListView.as_view(), name="applyrun_list"),
    path("audit-events/", views.AuditEventListView.as_view(), name="auditevent_list"),
    path("config/", views.ConfigView.as_view(), name="config"),
    path("config/export/", views.ConfigExportView.as_view(), name="config_export"),
    path("config/nftlb/", views.NftlbImportPageView.as_view(), name="nftlb_import"),
    path("config/versions/", views.ConfigVersionListView.as_view(), name="configversion_list"),
    path("config/versions/diff/", views.ConfigVersionDiffView.as_view(), name="configversion_diff"),
    path(
        "config/versions/<int:pk>/restore/",
        views.ConfigVersionRestoreView.as_view(),
        name="configversion_restore",
    ),
]
