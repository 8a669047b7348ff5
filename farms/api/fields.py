"""The API's input fields: the same refusals as the model and form fields (see ``farms.fields``)."""

from __future__ import annotations

from rest_framework import serializers

from ..fields import address_problem, integer_problem


class StrictIPAddressField(serializers.IPAddressField):
    def to_internal_value(self, data):
        problem = address_problem(data)
        if problem:
            raise serializers.ValidationError(problem, code="invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data):
        problem = integer_problem(data)
        if problem:
            raise serializers.ValidationError(problem, code="invalid")
        return super().to_internal_value(data)
