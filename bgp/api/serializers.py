"""BGP in the API: the password is write-only (``password_set`` says whether one is stored; omitting it keeps it,
an empty string clears it), as the authentication settings' secrets are."""

from __future__ import annotations

from rest_framework import serializers

from farms.api.serializers import ModelCleanMixin, StrictModelSerializer, actor_of

from .. import services
from ..models import ANNOUNCEMENT_FIELDS, PEER_FIELDS, SETTINGS_FIELDS, BgpPeer, BgpSettings, FarmAnnouncement


class BgpSettingsSerializer(ModelCleanMixin, StrictModelSerializer):
    class Meta:
        model = BgpSettings
        fields = [*SETTINGS_FIELDS, "drained", "drained_at", "status"]
        read_only_fields = ["drained", "drained_at", "status"]

    def update(self, instance, validated_data):
        return services.settings_update(settings=instance, actor=actor_of(self), **validated_data)


class DrainSerializer(serializers.Serializer):
    drained = serializers.BooleanField(
        help_text="true: announce with the graceful-shutdown community, then withdraw; false: announce again"
    )


class BgpPeerSerializer(ModelCleanMixin, StrictModelSerializer):
    password = serializers.CharField(
        required=False, allow_blank=True, max_length=80, write_only=True, trim_whitespace=False,
        help_text="the TCP-MD5 key; write-only (omitted: kept; empty: none)",
    )  # fmt: skip
    password_set = serializers.SerializerMethodField(help_text="Whether a TCP-MD5 password is stored.")

    class Meta:
        model = BgpPeer
        fields = ["id", *PEER_FIELDS, "password_set"]

    def get_password_set(self, obj) -> bool:
        return bool(obj.password)

    def create(self, validated_data):
        return services.peer_create(actor=actor_of(self), **validated_data)

    def update(self, instance, validated_data):
        return services.peer_update(peer=instance, actor=actor_of(self), **validated_data)


class FarmAnnouncementSerializer(ModelCleanMixin, StrictModelSerializer):
    farm = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = FarmAnnouncement
        fields = ["farm", *ANNOUNCEMENT_FIELDS]

    def update(self, instance, validated_data):
        return services.announcement_update(announcement=instance, actor=actor_of(self), **validated_data)
