from django.urls import path

from . import views

app_name = "accounts-api"

urlpatterns = [
    path("policy/", views.LoginPolicyView.as_view(), name="policy"),
    path("ldap/", views.LdapSettingsView.as_view(), name="ldap"),
    path("ldap/test/", views.LdapTestView.as_view(), name="ldap-test"),
    path("radius/", views.RadiusSettingsView.as_view(), name="radius"),
    path("radius/test/", views.RadiusTestView.as_view(), name="radius-test"),
    path("oidc/", views.OidcSettingsView.as_view(), name="oidc"),
    path("oidc/test/", views.OidcTestView.as_view(), name="oidc-test"),
]
