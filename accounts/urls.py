from django.urls import path

from . import settings_views, views

app_name = "accounts"

urlpatterns = [
    path("accounts/login/code/", views.SecondFactorView.as_view(), name="second_factor"),
    path("accounts/second-factor/", views.EnrolView.as_view(), name="enrol"),
    path("system/authentication/", settings_views.AuthenticationView.as_view(), name="authentication"),
]
