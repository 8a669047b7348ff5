"""The OpenAPI schema documents every status code the API answers, errors included.

drf-spectacular documents an operation's success only, so a client (or schemathesis, see
``tests/lbweb/test_api_schema_fuzz.py``) cannot tell a 400, 401, 403 or 404 from an undocumented failure.
DRF answers them the same way on every operation, so they are added here once, from what the
operation takes: 400 when it reads a body or query parameters, 404 when its path names an object,
401 and 403 when it needs an authenticated user. A 400 an operation already documents with its own
body (the imports' ``ImportResult``) may also be DRF's unparseable-body answer: both are listed.
"""

from __future__ import annotations

from drf_spectacular import openapi
from drf_spectacular.plumbing import ResolvedComponent

DETAIL = {
    "type": "object",
    "properties": {"detail": {"type": "string"}},
    "required": ["detail"],
    "description": "What went wrong, in words.",
}
FIELD_ERRORS = {
    "type": "object",
    "additionalProperties": {
        "anyOf": [{"type": "array"}, {"type": "object"}, {"type": "string"}],
    },
    "description": (
        "Field name → its messages (nested like the body for nested fields); 'non_field_errors' for the "
        "object as a whole; 'detail' alone when the body cannot be parsed."
    ),
}
ERRORS = {
    "400": ("ValidationErrors", FIELD_ERRORS, "The request is refused: see the messages, per field."),
    "401": ("ErrorDetail", DETAIL, "No valid credentials (token or session)."),
    "403": ("ErrorDetail", DETAIL, "The user's role does not allow this."),
    "404": ("ErrorDetail", DETAIL, "No such object."),
}


class AutoSchema(openapi.AutoSchema):
    def get_operation(self, path, path_regex, path_prefix, method, registry):
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        parameters = operation.get("parameters", [])
        codes = []
        if "requestBody" in operation or any(p["in"] == "query" for p in parameters):
            codes.append("400")
        if any(p["in"] == "path" for p in parameters):
            codes.append("404")
        if any(requirement for requirement in operation.get("security", [{}])):
            codes += ["401", "403"]
        responses = operation.setdefault("responses", {})
        for code in codes:
            name, schema, description = ERRORS[code]
            ref = self._component(name, schema)
            if code not in responses:
                responses[code] = {"content": {"application/json": {"schema": ref}}, "description": description}
            elif code == "400":
                for media in responses[code].get("content", {}).values():
                    media["schema"] = {"anyOf": [media["schema"], self._component("ErrorDetail", DETAIL)]}
        return operation

    def _component(self, name: str, schema: dict) -> dict:
        component = ResolvedComponent(name=name, type=ResolvedComponent.SCHEMA, object=name, schema=schema)
        self.registry.register_on_missing(component)
        return component.ref
