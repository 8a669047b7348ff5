"""Pagination of every list of the API."""

from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    """``?limit=`` and ``?offset=``, 100 by default; a larger limit is cut to ``max_limit`` (the answer's
    ``next`` link says there is more). Without a cut, ``?limit=9223372036854775808`` reached SQLite,
    which cannot bind a number beyond 64 bits (a 500)."""

    max_limit = 1000

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["description"] = f"Number of results to return per page (at most {self.max_limit})."
        return parameters
