"""Forms of the BGP page: the models' own validation (``clean()``) runs in them and in the services."""

from __future__ import annotations

from django import forms

from farms.forms import FieldsetsMixin

from .models import ANNOUNCEMENT_FIELDS, PEER_FIELDS, SETTINGS_FIELDS, BgpPeer, BgpSettings, FarmAnnouncement


class BgpSettingsForm(FieldsetsMixin, forms.ModelForm):
    groups = (("BGP", ("enabled", "local_asn", "router_id")), ("BFD and drain", ("bfd_interval_ms", "bfd_multiplier",
              "drain_seconds")))  # fmt: skip

    class Meta:
        model = BgpSettings
        fields = SETTINGS_FIELDS

    def values(self) -> dict:
        return {name: self.cleaned_data[name] for name in SETTINGS_FIELDS}


class BgpPeerForm(FieldsetsMixin, forms.ModelForm):
    """The password is write-only here too: the field starts empty, and left empty keeps the stored one unless
    "clear" is ticked."""

    password = forms.CharField(
        label="TCP-MD5 password", required=False, strip=False, max_length=80,
        widget=forms.PasswordInput(render_value=False), help_text="empty: keep the stored one (if any)",
    )  # fmt: skip
    clear_password = forms.BooleanField(required=False, label="Remove the stored password")
    groups = (
        ("Router", ("name", "address", "asn", "source_address", "multihop")),
        ("Session", ("password", "clear_password", "hold_time", "keepalive_time", "bfd")),
    )

    class Meta:
        model = BgpPeer
        fields = PEER_FIELDS

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.stored_password = self.instance.password if self.instance.pk else ""

    def _post_clean(self):
        typed = self.cleaned_data.get("password", "")
        if not typed and not self.cleaned_data.get("clear_password"):
            self.cleaned_data["password"] = self.stored_password
        super()._post_clean()

    def values(self) -> dict:
        return {name: self.cleaned_data[name] for name in PEER_FIELDS}


class FarmAnnouncementForm(FieldsetsMixin, forms.ModelForm):
    groups = (("Announcement", ("announce", "med", "communities")),)

    class Meta:
        model = FarmAnnouncement
        fields = ANNOUNCEMENT_FIELDS

    def values(self) -> dict:
        return {name: self.cleaned_data[name] for name in ANNOUNCEMENT_FIELDS}
