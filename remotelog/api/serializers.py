from rest_framework import serializers

from farms.api.serializers import ModelCleanMixin, StrictModelSerializer, actor_of

from .. import services
from ..models import FIELDS, SyslogServer


class SyslogServerSerializer(ModelCleanMixin, StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="remotelog-api:syslogserver-detail")

    class Meta:
        model = SyslogServer
        fields = ["id", "url", *FIELDS]
        extra_kwargs = {"name": {"validators": []}}

    def create(self, validated_data: dict) -> SyslogServer:
        return services.syslog_server_create(actor=actor_of(self), **validated_data)

    def update(self, instance: SyslogServer, validated_data: dict) -> SyslogServer:
        return services.syslog_server_update(server=instance, actor=actor_of(self), **validated_data)
