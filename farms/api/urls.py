from rest_framework.routers import DefaultRouter

from .views import ApplyRunViewSet, BackendViewSet, FarmViewSet

app_name = "farms-api"

router = DefaultRouter()
router.register("farms", FarmViewSet)
router.register("backends", BackendViewSet)
router.register("apply-runs", ApplyRunViewSet)

urlpatterns = router.urls
