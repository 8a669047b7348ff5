"""Filters of the farms API (django-filter)."""

import django_filters

from .models import ApplyRun, Backend, Farm, HealthEvent


class FarmFilterSet(django_filters.FilterSet):
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
