from __future__ import annotations

from rest_framework import serializers

from ..models import Cluster, Node, Transition
from ..services import CLUSTER_FIELDS, NODE_FIELDS


class NodeSerializer(serializers.ModelSerializer):
    # As typed: DRF's address field, as Django's, drops an IPv6 scope id silently; the model refuses one instead.
    address = serializers.CharField(max_length=64, help_text="its own address on the VRRP interface")
    sync_address = serializers.CharField(max_length=64, help_text="its own address on the sync link")

    class Meta:
        model = Node
        fields = NODE_FIELDS
        extra_kwargs = {"name": {"validators": []}}  # matched by name on update (cluster_update)


class ClusterSerializer(serializers.ModelSerializer):
    """The cluster's settings and its two nodes; the token is write-only (``token_set`` says if there is one)."""

    nodes = NodeSerializer(many=True, required=False)
    token_set = serializers.SerializerMethodField()

    class Meta:
        model = Cluster
        fields = (*CLUSTER_FIELDS, "nodes", "token_set")
        # The password as typed: trimmed here but not by ``manage.py cluster configure``, the two nodes could
        # differ; clean() refuses spaces at either end instead, with a message.
        extra_kwargs = {"token": {"write_only": True}, "auth_pass": {"trim_whitespace": False}}

    def get_token_set(self, obj) -> bool:
        return bool(obj.token)

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["nodes"] = NodeSerializer(Node.objects.all(), many=True).data
        return data


class TransitionSerializer(serializers.ModelSerializer):
    ok = serializers.BooleanField(read_only=True)

    class Meta:
        model = Transition
        fields = ("id", "node", "at", "from_state", "to_state", "reason", "ok", "addresses_up_ms", "steps")


class SyncSerializer(serializers.Serializer):
    """What a peer sends (``cluster.sync.push``): its name, its status, and from the master its configuration."""

    sender = serializers.CharField(max_length=64)
    status = serializers.DictField()
    config = serializers.DictField(required=False)
