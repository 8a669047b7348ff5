from django.urls import path

from .views import FarmSeriesView, MetricsSummaryView, SystemSeriesView

app_name = "metrics-api"

urlpatterns = [
    path("summary/", MetricsSummaryView.as_view(), name="summary"),
    path("system/", SystemSeriesView.as_view(), name="system"),
    path("farms/<int:farm_id>/", FarmSeriesView.as_view(), name="farm"),
]
