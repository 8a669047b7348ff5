from rest_framework.routers import DefaultRouter

from . import views

app_name = "remotelog-api"

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("syslog-servers", views.SyslogServerViewSet)
urlpatterns = router.urls
