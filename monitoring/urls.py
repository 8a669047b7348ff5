from django.urls import path

from .views import DashboardView, FarmDashboardView

app_name = "monitoring"

urlpatterns = [
    path("", DashboardView.as_view(), name="overview"),
    path("farms/<int:pk>/", FarmDashboardView.as_view(), name="farm"),
]
