"""REST viewsets, declared: queryset, serializer, filterset."""

from rest_framework import viewsets

from .. import services
from ..filtersets import ApplyRunFilterSet, BackendFilterSet, FarmFilterSet
from ..models import ApplyRun, Backend, Farm
from .serializers import ApplyRunSerializer, BackendSerializer, FarmSerializer


class FarmViewSet(viewsets.ModelViewSet):
    queryset = Farm.objects.prefetch_related("backends")
    serializer_class = FarmSerializer
    filterset_class = FarmFilterSet

    def perform_destroy(self, instance: Farm) -> None:
        services.farm_delete(farm=instance)


class BackendViewSet(viewsets.ModelViewSet):
    queryset = Backend.objects.select_related("farm")
    serializer_class = BackendSerializer
    filterset_class = BackendFilterSet

    def perform_destroy(self, instance: Backend) -> None:
        services.backend_delete(backend=instance)


class ApplyRunViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = ApplyRun.objects.all()
    serializer_class = ApplyRunSerializer
    filterset_class = ApplyRunFilterSet
