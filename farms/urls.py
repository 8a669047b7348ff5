from django.urls import path

from .views import FarmListView

app_name = "farms"

urlpatterns = [
    path("", FarmListView.as_view(), name="farm_list"),
]
