"""System › Authentication: the login policy and the three directories, each with Save and (directories) Test.

Every role reads the page; admins change it. A Test runs on the values in the form, saved or not (a blank secret
is the saved one), so an admin tries a change before making it; a refused value is shown on its field and
nothing changes, for Save and Test alike.
"""

from __future__ import annotations

import copy

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.debug import sensitive_post_parameters

from farms.roles import ADMIN, RoleRequiredMixin
from lbweb.views import add_errors

from . import services
from .checks.ldap import check_ldap
from .checks.oidc import check_oidc
from .checks.radius import check_radius
from .forms import LdapForm, LoginPolicyForm, OidcForm, RadiusForm, TestLoginForm
from .models import LdapSettings, LoginPolicy, OidcSettings, RadiusSettings

SECTIONS = {
    "policy": (LoginPolicy, LoginPolicyForm, services.login_policy_update, None),
    "ldap": (LdapSettings, LdapForm, services.ldap_update, check_ldap),
    "radius": (RadiusSettings, RadiusForm, services.radius_update, check_radius),
    "oidc": (OidcSettings, OidcForm, services.oidc_update, check_oidc),
}
SECRET_FIELDS = ("bind_password", "secret", "client_secret", "test_password")


def unsaved(model, values: dict):
    """The row as the form's values would make it, validated, not saved (what a Test tries)."""
    row = copy.copy(model.load())
    for name, value in values.items():
        if value is not None:
            setattr(row, name, value)
    row.full_clean()
    return row


@method_decorator(sensitive_post_parameters(*SECRET_FIELDS), name="dispatch")
class AuthenticationView(RoleRequiredMixin, View):
    write_role = ADMIN
    template_name = "system/authentication.html"

    def forms(self, bound: str | None = None, data=None) -> dict:
        return {
            name: form_class(data if name == bound else None, instance=model.load(), prefix=name)
            for name, (model, form_class, _, _) in SECTIONS.items()
        }

    def render_page(self, request, forms, *, status=200, test=None, tested=None, test_form=None):
        context = {
            "forms": forms,
            "test": test,
            "tested": tested,
            "test_form": test_form or TestLoginForm(),
            "callback_url": request.build_absolute_uri("/oidc/callback/"),
        }
        return render(request, self.template_name, context, status=status)

    def get(self, request):
        return self.render_page(request, self.forms())

    def post(self, request):
        section = request.POST.get("section", "")
        if section not in SECTIONS:
            return redirect("accounts:authentication")
        model, _, update, check = SECTIONS[section]
        forms = self.forms(section, request.POST)
        form = forms[section]
        test_form = TestLoginForm(request.POST if request.POST.get("action") == "test" else None)
        if not form.is_valid():
            return self.render_page(request, forms, status=400, test_form=test_form)
        values = form.service_values()
        if request.POST.get("action") == "test" and check is not None:
            try:
                row = unsaved(model, values)
            except ValidationError as error:
                add_errors(form, error)
                return self.render_page(request, forms, status=400, test_form=test_form)
            test_form.is_valid()
            if section == "oidc":
                result = check(row, redirect_uri=request.build_absolute_uri("/oidc/callback/"))
            else:
                who = test_form.cleaned_data
                result = check(row, who.get("test_username", ""), who.get("test_password", ""))
            return self.render_page(request, forms, test=result, tested=section, test_form=test_form)
        try:
            update(actor=request.user, **values)
        except ValidationError as error:
            add_errors(form, error)
            return self.render_page(request, forms, status=400)
        messages.success(request, f"{model.load()} settings saved.")
        return redirect(f"{request.path}#{section}")
