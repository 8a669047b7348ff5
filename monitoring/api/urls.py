from django.urls import path
from rest_framework.routers import SimpleRouter

from .tokens import MetricsTokenViewSet
from .views import FarmSeriesView, MetricsSummaryView, SystemSeriesView

app_name = "metrics-api"

router = SimpleRouter()
router.register("tokens", MetricsTokenViewSet)

urlpatterns = [
    path("summary/", MetricsSummaryView.as_view(), name="summary"),
    path("system/", SystemSeriesView.as_view(), name="system"),
    path("farms/<int:farm_id>/", FarmSeriesView.as_view(), name="farm"),
    *router.urls,
]
