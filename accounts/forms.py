"""Forms of the login and System › Authentication pages.

A secret field is write-only: always shown empty, left empty to keep the stored value, with a box to clear it.
The checks are the models' ``clean()``, run by the services (the API refuses the same input with the same words).
"""

from __future__ import annotations

from django import forms

from .models import LdapSettings, LoginPolicy, OidcSettings, RadiusSettings
from .services import LDAP_FIELDS, OIDC_FIELDS, POLICY_FIELDS, RADIUS_FIELDS

PEM_ROWS = {"rows": 5, "spellcheck": "false", "autocomplete": "off"}


class CodeForm(forms.Form):
    otp_token = forms.CharField(
        label="Code",
        max_length=20,
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "numeric", "autofocus": True}),
        help_text="The 6 digits your authenticator app shows now, or one of your recovery codes.",
    )


class SettingsForm(forms.ModelForm):
    """A settings row's form: the secret is never rendered, blank keeps it, ``clear_<secret>`` empties it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for secret in self._meta.model.SECRETS:
            field = self.fields[secret]
            field.required = False
            field.widget = forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"})
            is_set = bool(getattr(self.instance, secret))
            field.help_text = "Set: leave blank to keep it." if is_set else "Not set."
            self.fields[f"clear_{secret}"] = forms.BooleanField(
                required=False, label=f"Clear the {field.label.lower()}"
            )
        for field in self.fields.values():
            if isinstance(field.widget, forms.Textarea):
                field.widget.attrs.update(PEM_ROWS)

    def _post_clean(self):
        """The models' clean() runs in the service, with the secret kept or changed as asked: not here."""

    def service_values(self) -> dict:
        values = {name: self.cleaned_data[name] for name in self._meta.fields}
        for secret in self._meta.model.SECRETS:
            if self.cleaned_data.get(f"clear_{secret}"):
                values[secret] = ""
            elif not values[secret]:
                values[secret] = None  # keep
        return values


class LoginPolicyForm(SettingsForm):
    class Meta:
        model = LoginPolicy
        fields = POLICY_FIELDS


class LdapForm(SettingsForm):
    class Meta:
        model = LdapSettings
        fields = LDAP_FIELDS
        widgets = {"server_uris": forms.TextInput(attrs={"spellcheck": "false"})}


class RadiusForm(SettingsForm):
    class Meta:
        model = RadiusSettings
        fields = RADIUS_FIELDS


class OidcForm(SettingsForm):
    class Meta:
        model = OidcSettings
        fields = OIDC_FIELDS


class TestLoginForm(forms.Form):
    """Who to try in a Test (optional: without a name, the Test stops after the server and the service account)."""

    test_username = forms.CharField(label="User name", required=False, max_length=150)
    test_password = forms.CharField(
        label="Password", required=False, strip=False, widget=forms.PasswordInput(render_value=False)
    )
