"""OpenAPI (drf-spectacular): the token login's HTTP Basic is the standard scheme, lockout or not."""

from drf_spectacular.authentication import BasicScheme


class LockoutBasicScheme(BasicScheme):
    target_class = "system.api.LockoutBasicAuthentication"
