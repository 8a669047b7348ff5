from django.urls import path
from rest_framework.routers import SimpleRouter

from .views import ClusterStatusView, ClusterSyncView, ClusterView, TransitionViewSet

app_name = "cluster-api"

router = SimpleRouter()
router.register("cluster/transitions", TransitionViewSet)

urlpatterns = [
    path("cluster/", ClusterView.as_view(), name="cluster"),
    path("cluster/status/", ClusterStatusView.as_view(), name="cluster-status"),
    path("cluster/sync/", ClusterSyncView.as_view(), name="cluster-sync"),
    *router.urls,
]
