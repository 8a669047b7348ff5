"""nftlb documents over the REST API: import (create or update farms by name) and export."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from ..models import Farm, Policy
from ..nftlb import export_document, nftlb_import

TRUE_WORDS = ("1", "true", "yes", "on")


def _flag(request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in TRUE_WORDS


class NftlbDocumentSerializer(serializers.Serializer):
    """nftlb's JSON document: farms and policies with nftlb's attribute names (values as strings)."""

    farms = serializers.ListField(child=serializers.DictField(), help_text="nftlb farm objects.")
    policies = serializers.ListField(
        child=serializers.DictField(), required=False, help_text="nftlb policy objects (blacklist/whitelist)."
    )
    addresses = serializers.ListField(
        child=serializers.DictField(), required=False, help_text="nftlb address objects farms refer to by name."
    )


class NftlbErrorSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="Where in the document, e.g. farms[2].backends[0].ip-addr.")
    message = serializers.CharField()


class NftlbUnknownSerializer(serializers.Serializer):
    path = serializers.CharField()
    attribute = serializers.CharField()


class NftlbIgnoredSerializer(serializers.Serializer):
    path = serializers.CharField()
    attribute = serializers.CharField()
    value = serializers.CharField()
    reason = serializers.CharField(help_text="Why lbweb does not keep this attribute or this part of its value.")


class NftlbNoteSerializer(serializers.Serializer):
    path = serializers.CharField()
    attribute = serializers.CharField()
    message = serializers.CharField()


class NftlbSkippedSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="The farm or policy left out, e.g. farms[2].")
    kind = serializers.CharField(help_text="farm, policy or document.")
    name = serializers.CharField()
    errors = NftlbErrorSerializer(many=True)


class NftlbImportResultSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    farms_created = serializers.ListField(child=serializers.CharField())
    farms_updated = serializers.ListField(child=serializers.CharField())
    policies_created = serializers.ListField(child=serializers.CharField())
    policies_updated = serializers.ListField(child=serializers.CharField())
    errors = NftlbErrorSerializer(many=True, help_text="Empty on success; on a 400, every refused value.")
    unknown = NftlbUnknownSerializer(many=True, help_text="Attributes neither nftlb nor lbweb knows: not applied.")
    ignored = NftlbIgnoredSerializer(many=True, help_text="nftlb settings lbweb does not keep, with the reason.")
    warnings = NftlbNoteSerializer(many=True, help_text="Accepted, but worth a look (e.g. hash with persistence).")
    differences = NftlbNoteSerializer(
        many=True, help_text="Where lbweb deliberately behaves otherwise than nftlb with this document."
    )
    partial = serializers.BooleanField(help_text="True when asked to import what is valid and skip the rest.")
    skipped = NftlbSkippedSerializer(many=True, help_text="Partial import: farms and policies left out, with why.")


EXAMPLE = {
    "farms": [
        {
            "name": "web",
            "family": "ipv4",
            "virtual-addr": "198.18.100.1",
            "virtual-ports": "80,443",
            "mode": "dnat",
            "protocol": "tcp",
            "scheduler": "weight",
            "persistence": "srcip",
            "persist-ttl": "120",
            "new-rtlimit": "20/second",
            "backends": [
                {"name": "bck0", "ip-addr": "198.18.1.11", "weight": "5", "state": "up"},
                {"name": "bck1", "ip-addr": "198.18.1.12", "weight": "5", "priority": "2", "state": "up"},
            ],
        }
    ]
}


class NftlbImportView(APIView):
    """Import an nftlb (or SKUDONET L4xNAT) JSON document."""

    takes_documents = True  # a whole nftlb configuration (lbweb/api_parsers.py)

    @extend_schema(
        operation_id="nftlb_import",
        summary="Import an nftlb JSON document",
        description=(
            "Creates or updates farms and policies by name, in one transaction: all or nothing (or, with "
            "`partial=1`, every valid farm and policy, each whole, the others listed in `skipped`). A farm of the "
            "document replaces the farm of that name (attributes left out take their defaults; backends, "
            "static sessions and policies become the document's). Values are nftlb's (strings); lbweb also "
            "takes the extensions `description`, `source-ports`, scheduler `leastconn`, verdict `reject` and "
            "backend state `drain`. Unknown attributes are listed in `unknown` and not applied (they are "
            "errors with `strict=1`); nftlb settings lbweb does not keep are listed in `ignored` with the "
            "reason. Each error names its place in the document, e.g. `farms[2].backends[0].ip-addr`."
        ),
        parameters=[
            OpenApiParameter("dry_run", bool, description="Validate only: nothing is written or applied."),
            OpenApiParameter("strict", bool, description="Refuse the document if it has unknown attributes."),
            OpenApiParameter(
                "partial",
                bool,
                description="Import every farm and policy that is valid, each whole; list the others in `skipped`.",
            ),
        ],
        request=NftlbDocumentSerializer,
        responses={200: NftlbImportResultSerializer, 400: NftlbImportResultSerializer},
        examples=[OpenApiExample("A DNAT farm", value=EXAMPLE, request_only=True)],
    )
    def post(self, request):
        result = nftlb_import(
            document=request.data,
            dry_run=_flag(request, "dry_run"),
            strict=_flag(request, "strict"),
            partial=_flag(request, "partial"),
            actor=request.user,
        )
        code = status.HTTP_200_OK if result.ok else status.HTTP_400_BAD_REQUEST
        return Response(result.as_dict(), status=code)


class NftlbExportView(APIView):
    """Export farms as an nftlb JSON document."""

    @extend_schema(
        operation_id="nftlb_export",
        summary="Export farms as an nftlb JSON document",
        description=(
            "Every farm with its backends (named bck0, bck1, ...), static sessions and policies, and every "
            "policy; or, with `farm`, one farm and the policies it uses. Importing the result into lbweb gives "
            "the same farms back."
        ),
        parameters=[OpenApiParameter("farm", str, description="Export only the farm of this name.")],
        responses={
            200: NftlbDocumentSerializer,
            404: inline_serializer("NftlbExportNotFound", {"detail": serializers.CharField()}),
        },
    )
    def get(self, request):
        farms = Farm.objects.prefetch_related("backends", "static_sessions", "policies")
        name = request.query_params.get("farm")
        if name is not None:
            farms = farms.filter(name=name)
            if not farms:
                return Response({"detail": f"no farm named '{name}'"}, status=status.HTTP_404_NOT_FOUND)
            return Response(export_document(farms))
        return Response(export_document(farms, policies=Policy.objects.all()))
