"""Filters of the farms API (django-filter)."""

import django_filters

from .models import ApplyRun, AuditEvent, Backend, Farm, HealthEvent


class NumberInFilter(django_filters.BaseInFilter, django_filters.NumberFilter):
    pass


class FarmFilterSet(django_filters.FilterSet):
    id = NumberInFilter(field_name="id", help_text="Comma-separated farm ids.")

    class Meta:
        model = Farm
        fields = ["name", "vip", "protocol", "mode", "scheduler", "state"]


class BackendFilterSet(django_filters.FilterSet):
    farm_name = django_filters.CharFilter(field_name="farm__name")

    class Meta:
        model = Backend
        fields = ["farm", "farm_name", "address", "port", "state", "health"]


class ApplyRunFilterSet(django_filters.FilterSet):
    class Meta:
        model = ApplyRun
        fields = ["ok", "kind"]


class HealthEventFilterSet(django_filters.FilterSet):
    farm = django_filters.NumberFilter(field_name="backend__farm")

    class Meta:
        model = HealthEvent
        fields = ["backend", "farm", "current"]


class AuditEventFilterSet(django_filters.FilterSet):
    since = django_filters.IsoDateTimeFilter(field_name="time", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="time", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["actor_name", "action", "object_type", "object_id", "farm_ref", "since", "until"]
