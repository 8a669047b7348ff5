"""Filters of the farms API (django-filter).

Every integer filter reads a whole number the database can hold (64-bit signed): django-filter's own
NumberFilter takes any decimal, and ``?id=99999999999999999999`` reached SQLite, which cannot bind it
(a 500). :class:`FilterBackend` (the API's default filter backend) builds the filtersets of views that
only list ``filterset_fields`` on :class:`FilterSet` too, so every endpoint gets the same bounds.
"""

import re

from django import forms
from django.db import models
from django_filters import rest_framework as django_filters

from .models import ApplyRun, AuditEvent, Backend, Farm, HealthEvent

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class IntegerFormField(forms.IntegerField):
    """A whole number within the database's 64-bit range, written with ASCII digits."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("min_value", INT64_MIN)
        kwargs.setdefault("max_value", INT64_MAX)
        super().__init__(*args, **kwargs)

    def to_python(self, value):
        if isinstance(value, str) and value.strip() and not re.fullmatch(r"-?[0-9]+", value.strip()):
            raise forms.ValidationError("Enter a whole number written with the digits 0-9.", code="invalid")
        return super().to_python(value)


class IntegerFilter(django_filters.NumberFilter):
    field_class = IntegerFormField


class NumberInFilter(django_filters.BaseInFilter, IntegerFilter):
    pass


INTEGER_FIELDS = (
    models.AutoField,
    models.BigAutoField,
    models.SmallAutoField,
    models.IntegerField,
    models.BigIntegerField,
    models.SmallIntegerField,
    models.PositiveIntegerField,
    models.PositiveBigIntegerField,
    models.PositiveSmallIntegerField,
)


class FilterSet(django_filters.FilterSet):
    """The base of every filterset of the API: integer fields filter through :class:`IntegerFilter`."""

    FILTER_DEFAULTS = {
        **django_filters.FilterSet.FILTER_DEFAULTS,
        **{kind: {"filter_class": IntegerFilter} for kind in INTEGER_FIELDS},
    }


class FilterBackend(django_filters.DjangoFilterBackend):
    filterset_base = FilterSet


class FarmFilterSet(FilterSet):
    id = NumberInFilter(field_name="id", help_text="Comma-separated farm ids.")

    class Meta:
        model = Farm
        fields = ["name", "vip", "protocol", "mode", "scheduler", "state"]


class BackendFilterSet(FilterSet):
    farm_name = django_filters.CharFilter(field_name="farm__name")

    class Meta:
        model = Backend
        fields = ["farm", "farm_name", "address", "port", "state", "health"]


class ApplyRunFilterSet(FilterSet):
    class Meta:
        model = ApplyRun
        fields = ["ok", "kind"]


class HealthEventFilterSet(FilterSet):
    farm = IntegerFilter(field_name="backend__farm")

    class Meta:
        model = HealthEvent
        fields = ["backend", "farm", "current"]


class AuditEventFilterSet(FilterSet):
    """The audit log's filters, the same for the API and the page ``/audit-events/`` (which renders its form)."""

    farm = IntegerFilter(field_name="farm_ref", label="Farm", help_text="The farm's id (kept after it is deleted).")
    actor_name = django_filters.CharFilter(label="Who")
    action = django_filters.CharFilter(label="Action")
    object_type = django_filters.CharFilter(label="Object")
    date = django_filters.DateFromToRangeFilter(
        field_name="time__date",
        label="Date",
        help_text="Days, both included: date_after=2026-11-01&date_before=2026-11-30 (either may be left out).",
    )
    since = django_filters.IsoDateTimeFilter(field_name="time", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="time", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["actor_name", "action", "object_type", "object_id", "farm_ref", "farm", "date", "since", "until"]
