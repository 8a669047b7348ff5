"""The admin site shows which accounts a directory made (read-only: a directory's login writes them). A second
factor is reset for a lost phone under OTP › TOTP devices and OTP › Static devices (django-otp's own pages)."""

from django.contrib import admin

from .models import DirectoryAccount


@admin.register(DirectoryAccount)
class DirectoryAccountAdmin(admin.ModelAdmin):
    list_display = ("user", "source", "role", "last_login", "subject")
    list_filter = ("source", "role")
    readonly_fields = ("user", "source", "subject", "role", "last_login")

    def has_add_permission(self, request):
        return False
