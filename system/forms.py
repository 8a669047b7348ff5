"""The certificate upload form of the TLS page: PEM text, uploaded as files or pasted."""

from __future__ import annotations

from django import forms

PEM_ROWS = {"rows": 6, "spellcheck": "false", "autocomplete": "off"}


class CertificateUploadForm(forms.Form):
    """A certificate (optionally followed by its chain), an optional chain and the private key.

    Each can be a file or pasted text; the file wins when both are given. The checks themselves are
    :func:`system.tls.validate`'s, shared with the API.
    """

    certificate_file = forms.FileField(required=False, label="Certificate file (PEM)")
    certificate = forms.CharField(
        required=False, strip=False, label="… or paste the certificate", widget=forms.Textarea(attrs=PEM_ROWS)
    )
    chain_file = forms.FileField(required=False, label="Chain file (PEM, optional)")
    chain = forms.CharField(
        required=False, strip=False, label="… or paste the chain", widget=forms.Textarea(attrs=PEM_ROWS)
    )
    key_file = forms.FileField(required=False, label="Private key file (PEM, unencrypted)")
    key = forms.CharField(
        required=False, strip=False, label="… or paste the private key", widget=forms.Textarea(attrs=PEM_ROWS)
    )

    def pem(self, name: str) -> str:
        upload = self.cleaned_data.get(f"{name}_file")
        if upload:
            return upload.read(1 << 20).decode("utf-8", errors="replace")
        return self.cleaned_data.get(name) or ""


class BackupDownloadForm(forms.Form):
    passphrase = forms.CharField(
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text="At least 12 characters. Without it the archive cannot be opened: keep it apart from the archive.",
    )


class BackupRestoreForm(forms.Form):
    archive = forms.FileField(label="Backup archive (.lbbackup)")
    passphrase = forms.CharField(strip=False, widget=forms.PasswordInput(attrs={"autocomplete": "off"}))


class BackupScheduleForm(forms.Form):
    enabled = forms.BooleanField(required=False, label="Write backups on a schedule")
    directory = forms.CharField(
        required=False, help_text="An absolute path the worker may write (on the appliance: under /var/lib/lbweb)."
    )
    interval_hours = forms.IntegerField(label="Every (hours)", min_value=1, max_value=720)
    keep = forms.IntegerField(label="Keep the newest", min_value=1, max_value=1000)
    passphrase = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text="Blank: keep the stored one. Never shown again once saved.",
    )
