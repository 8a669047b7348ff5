"""The API's errors in JSON: Django ValidationErrors raised by services become field-keyed 400s, like DRF's
own, and a body Django itself finds too large (a form's, past DATA_UPLOAD_MAX_MEMORY_SIZE) a 413, not
Django's HTML 400 (JSON bodies are measured by lbweb/api_parsers.py)."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers
from rest_framework.views import exception_handler as drf_exception_handler

from lbweb.api_parsers import too_large


def exception_handler(exc, context):
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        exc = serializers.ValidationError(detail)
    elif isinstance(exc, RequestDataTooBig):
        exc = too_large(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    return drf_exception_handler(exc, context)
