"""Input fields that refuse what Python and Django would silently rewrite into something else.

Django's and DRF's address fields drop an IPv6 zone id (``fe80::1%lo`` becomes ``fe80::1``: nftables
matches the address alone, so the operator's interface is lost without a word), and ``int()`` reads
``"٨٠"`` (Arabic-Indic digits) and ``"8_0"`` as 80; DRF's turns an IPv4-mapped IPv6 address into the
IPv4 address. The model field, the form fields and the API's
fields here and in ``farms.api.fields`` refuse both, so the UI, the API and the imports take the same input.
"""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError
from django.db import models

from .validation import parse_address


def address_problem(value) -> str | None:
    """Why ``value`` must be refused before Django's address fields rewrite it, or None."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        address = parse_address(value.strip())
    except ValueError as exc:
        return f"{exc}." if "%" in value or not value.isascii() else None  # else Django's own words
    if address.version == 6 and address.ipv4_mapped is not None:  # Django would turn it into the IPv4 address
        return f"{value} is an IPv4-mapped IPv6 address (such packets arrive as IPv4): write {address.ipv4_mapped}."
    return None


def integer_problem(value) -> str | None:
    if isinstance(value, str) and (not value.isascii() or "_" in value):
        return f"'{value}' is not a whole number written with the digits 0-9."
    return None


class AddressFormField(forms.GenericIPAddressField):
    def to_python(self, value):
        problem = address_problem(value)
        if problem:
            raise ValidationError(problem, code="invalid")
        return super().to_python(value)


class AddressField(models.GenericIPAddressField):
    """An IPv4 or IPv6 address; a zone id or non-ASCII text is refused, never dropped."""

    def to_python(self, value):
        problem = address_problem(value)
        if problem:
            raise ValidationError(problem, code="invalid")
        return super().to_python(value)

    def formfield(self, **kwargs):
        return super().formfield(**{"form_class": AddressFormField, **kwargs})


class StrictIntegerFormField(forms.IntegerField):
    def to_python(self, value):
        problem = integer_problem(value)
        if problem:
            raise ValidationError(problem, code="invalid")
        return super().to_python(value)


def strict_formfield(field: models.Field, **kwargs):
    """ModelForm ``formfield_callback``: integer fields read ASCII digits only."""
    if isinstance(field, models.IntegerField) and not field.choices:
        kwargs.setdefault("form_class", StrictIntegerFormField)
    return field.formfield(**kwargs)
