"""The REST API's JSON parser: a depth limit and a size limit, each answered in JSON (400 and 413).

Depth: Python's ``json`` recurses once per ``[`` or ``{``, and a body of 50,000 of them raised
``RecursionError``, which DRF's parser does not catch (a 500). Every document lbweb takes (a farm, the
export of the whole configuration, an nftlb document, the cluster's sync) is a few levels deep: a body
nested deeper than ``MAX_DEPTH`` is a 400 that says so.

Size: a body larger than the endpoint takes is a 413 in JSON. Most endpoints take Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE`` (2.5 MB, enough for any farm); the endpoints that take whole documents (a
view with ``takes_documents = True``: the configuration and nftlb imports, the cluster's sync) take
``LBWEB_IMPORT_MAX_BYTES``, so the export of a large appliance can be imported again. DRF reads
``request.body`` for its own JSON parser, where Django refuses anything above ``DATA_UPLOAD_MAX_MEMORY_SIZE``
with its HTML 400; this parser is not DRF's subclass, so it gets the stream and reads at most its limit.
Where Django's own check fires all the same (a form or multipart body), ``farms/api/exceptions.py`` answers
413 in JSON too.

Set once for every endpoint in ``REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]`` (lbweb/settings.py). The pages
that import an uploaded document parse it with :func:`loads` (the same limit of depth).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import exceptions, parsers, renderers, status
from rest_framework.settings import api_settings
from rest_framework.utils import json

MAX_DEPTH = 64


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is larger than this endpoint takes."
    default_code = "body_too_large"


def too_large(limit: int, size: int | None = None) -> BodyTooLarge:
    told = f"The request body is {size:,} bytes" if size is not None else "The request body is larger"
    return BodyTooLarge(f"{told}; this endpoint takes at most {limit:,}.")


class TooDeep(ValueError):
    """A JSON document nested deeper than :data:`MAX_DEPTH`."""


CONTAINERS = (dict, list)


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` (parsed JSON) nests lists and dicts more than ``limit`` levels: a walk one level at a
    time, without recursion, that costs less than the parse (an 11.7 MB document of 10,000 farms: ~0.1 s
    beside json's 0.2 s)."""
    level = [value] if type(value) in CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: list = []
        for item in level:
            below += [child for child in (item.values() if type(item) is dict else item) if type(child) in CONTAINERS]
        level = below
    return False


def loads(text: str | bytes, *, strict: bool = True) -> Any:
    """``json.loads`` that refuses a document nested deeper than ``MAX_DEPTH`` with :class:`TooDeep` (a
    ValueError, as any other malformed document)."""
    try:
        value = json.loads(text, parse_constant=json.strict_constant if strict else None)
    except RecursionError:  # deeper than Python's own recursion limit: far deeper than MAX_DEPTH
        value = None
        deep = True
    else:
        deep = deeper_than(value, MAX_DEPTH)
    if deep:
        raise TooDeep(f"arrays and objects nested deeper than {MAX_DEPTH} levels; lbweb's documents take a few")
    return value


def body_limit(view) -> int:
    """The most bytes ``view`` takes in a request body (module docstring)."""
    if getattr(view, "takes_documents", False):
        return settings.LBWEB_IMPORT_MAX_BYTES
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


class JSONParser(parsers.BaseParser):
    """JSON bodies, refused when nested deeper than ``MAX_DEPTH`` (400) or larger than the view takes (413)."""

    media_type = "application/json"
    renderer_class = renderers.JSONRenderer
    strict = api_settings.STRICT_JSON

    def parse(self, stream, media_type=None, parser_context=None):
        context = parser_context or {}
        limit = body_limit(context.get("view"))
        request = context.get("request")
        declared = _content_length(request)
        if declared is not None and declared > limit:
            raise too_large(limit, declared)  # said before a byte of it is read
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise too_large(limit)
        encoding = parsers.get_encoding(context)
        try:
            return loads(raw.decode(encoding), strict=self.strict)
        except UnicodeDecodeError as exc:
            raise exceptions.ParseError(f"JSON parse error - the body is not {encoding}: {exc}") from exc
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from exc


def _content_length(request) -> int | None:
    try:
        return int(request.META.get("CONTENT_LENGTH") or "")
    except (AttributeError, TypeError, ValueError):
        return None
