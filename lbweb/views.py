"""The edit and delete pages every app's objects share: a subclass says which object, which form and which
service saves or deletes it; these say how a page validates, previews, saves, reports a refusal and confirms.

Roles are those of :mod:`farms.roles` (admins write, by default); the templates are ``farms/object_edit.html`` and
``farms/object_delete.html`` unless a page names its own.
"""

from __future__ import annotations

import copy

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views import View

from farms.roles import ADMIN, RoleRequiredMixin, has_role


class ObjectEditView(RoleRequiredMixin, View):
    """Create or edit one object: validate, optionally preview the kernel change, save through a service."""

    required_role = ADMIN
    template_name = "farms/object_edit.html"
    form_class = None
    noun = ""
    error_status = 200  # of a page shown again with its errors (a form refused, a save refused)

    def get_object(self):
        return None

    def new_instance(self):
        return self.form_class._meta.model()

    def get_form(self, obj, data=None):
        return self.form_class(data, instance=copy.copy(obj) if obj is not None else self.new_instance())

    def preview(self, obj, form):
        """The kernel change the form would make (a ``farms.preview.Preview``), or None: no Preview button."""
        return None

    def save(self, obj, form):
        raise NotImplementedError

    def cancel_url(self, obj) -> str:
        raise NotImplementedError

    def done_url(self, saved) -> str:
        return self.cancel_url(saved)

    def saved_message(self, saved) -> str:
        return f"{self.noun[:1].upper()}{self.noun[1:]} {saved} saved; the kernel follows in a moment."

    def refused(self, obj, form, exc: ValidationError) -> HttpResponse:
        """The page again with the service's refusal on the fields it names."""
        add_errors(form, exc)
        return self.render_form(obj, form, status=self.error_status)

    def render_form(self, obj, form, change_preview=None, *, status: int = 200, **extra) -> HttpResponse:
        context = {
            "form": form,
            "object": obj,
            "noun": self.noun,
            "title": self.page_title(obj),
            "preview": change_preview,
            "cancel_url": self.cancel_url(obj),
            "can_preview": type(self).preview is not ObjectEditView.preview,
            "read_only": not has_role(self.request.user, self.write_role or self.required_role),
            **extra,
        }
        return render(self.request, self.template_name, context, status=status)

    def page_title(self, obj) -> str:
        return f"Edit {self.noun} {obj}" if obj is not None else f"New {self.noun}"

    def get(self, request, *args, **kwargs):
        obj = self.get_object()
        return self.render_form(obj, self.get_form(obj))

    def post(self, request, *args, **kwargs):
        obj = self.get_object()
        form = self.get_form(obj, request.POST)
        if not form.is_valid():
            return self.render_form(obj, form, status=self.error_status)
        if "_preview" in request.POST:
            return self.render_form(obj, form, self.preview(obj, form))
        try:
            saved = self.save(obj, form)
        except ValidationError as exc:
            return self.refused(obj, form, exc)
        messages.success(request, self.saved_message(saved))
        return redirect(self.done_url(saved))


def add_errors(form, exc: ValidationError) -> None:
    """A service's ValidationError on the form: on each field it names, else on the form as a whole."""
    if hasattr(exc, "error_dict"):
        for name, errors in exc.error_dict.items():
            form.add_error(name if name in form.fields else None, errors)
    else:
        form.add_error(None, exc)


class ObjectDeleteView(RoleRequiredMixin, View):
    """Confirm, with the kernel change it causes, then delete through a service."""

    required_role = ADMIN
    template_name = "farms/object_delete.html"
    noun = ""

    def get_object(self):
        raise NotImplementedError

    def preview(self, obj):
        """The kernel change the deletion makes (a ``farms.preview.Preview``), or None."""
        return None

    def delete(self, obj) -> None:
        raise NotImplementedError

    def cancel_url(self, obj) -> str:
        raise NotImplementedError

    def done_url(self, obj) -> str:
        raise NotImplementedError

    def render_page(self, obj, error: str = ""):
        context = {
            "object": obj,
            "noun": self.noun,
            "preview": self.preview(obj),
            "cancel_url": self.cancel_url(obj),
            "error": error,
        }
        return render(self.request, self.template_name, context)

    def get(self, request, *args, **kwargs):
        return self.render_page(self.get_object())

    def post(self, request, *args, **kwargs):
        obj = self.get_object()
        done, name = self.done_url(obj), str(obj)
        try:
            self.delete(obj)
        except ValidationError as exc:
            return self.render_page(obj, " ".join(exc.messages))
        messages.success(request, f"{self.noun.capitalize()} {name} deleted.")
        return redirect(done)
