"""Admin: read-only apply history. Farms are written only through services (API and UI)."""

from django.contrib import admin

from .models import ApplyRun


@admin.register(ApplyRun)
class ApplyRunAdmin(admin.ModelAdmin):
    list_display = ("id", "generation", "kind", "ok", "duration_ms", "started")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
