"""Django ValidationErrors raised by services become field-keyed 400s, like DRF's own."""

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        exc = serializers.ValidationError(detail)
    return drf_exception_handler(exc, context)
