from django.urls import path

from . import views

app_name = "remotelog"

urlpatterns = [
    path("", views.SyslogServerListView.as_view(), name="syslog"),
    path("add/", views.SyslogServerEditView.as_view(), name="syslog_add"),
    path("<int:pk>/", views.SyslogServerEditView.as_view(), name="syslog_edit"),
    path("<int:pk>/delete/", views.SyslogServerDeleteView.as_view(), name="syslog_delete"),
]
