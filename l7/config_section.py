"""HTTP farms' own rows in the configuration document: the section ``http`` of export, import, configuration
versions and restore.

The farms' part of the document carries an HTTP farm's VIP, ports, mode and backends like any farm's; without this
section its HTTP options, services and backends' service/capacity/TLS would be lost on the way (an exported HTTP
farm would come back answering every request from one default service, an HTTPS farm without its certificates).

Certificates travel by name only. Their private keys never leave the appliance in a document (an export is a file
an operator downloads and mails; configuration versions are shown as diffs), so a document naming a certificate the
appliance does not hold is refused at that place, with the name to upload first.

A document with the section makes every HTTP farm equal to it (a farm it does not list gets the defaults and no
services); a document without it (made before this section existed) leaves HTTP options as they are.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import CharField, TextField

from compiler.types import Json
from farms.choices import L7_MODES
from farms.config_io import ImportError_, ImportResult, register_section, type_errors, validation_errors
from farms.models import Backend, Farm

from . import services
from .models import Certificate, HttpService, L7Backend, L7Farm

KEY = "http"
OPTION_FIELDS = tuple(name for name in services.L7FARM_FIELDS if name != "default_certificate")
BACKEND_FIELDS = tuple(name for name in services.BACKEND_OPTION_FIELDS if name != "service")
ENTRY_FIELDS = {"farm", "options", "certificates", "default_certificate", "services", "backends"}


def _as_the_api_reads(model, item: Json) -> Json:
    """``item`` with the surrounding white space of its text fields removed, as the API's serializers and the forms
    remove it (choices are taken as they are there too): a document refuses and accepts exactly what the API does,
    and ``cookie_name: "LBX\\n"`` is the API's ``LBX``, not a name HAProxy would refuse."""
    out = dict(item)
    for name, value in item.items():
        try:
            field_ = model._meta.get_field(name)
        except Exception:  # not a model field: type_errors and the unknown-field check say so
            continue
        if isinstance(value, str) and isinstance(field_, CharField | TextField) and not field_.choices:
            out[name] = value.strip()
    return out


def _field_defaults(model, fields: tuple[str, ...]) -> Json:
    return {name: model._meta.get_field(name).get_default() for name in fields}


def _values(row, fields: tuple[str, ...]) -> Json:
    return {name: getattr(row, name) for name in fields}


def _options_of(options: L7Farm | None) -> Json:
    return _field_defaults(L7Farm, OPTION_FIELDS) if options is None else _values(options, OPTION_FIELDS)


def _backend_of(backend: Backend, options: L7Backend | None) -> Json:
    values = _field_defaults(L7Backend, BACKEND_FIELDS) if options is None else _values(options, BACKEND_FIELDS)
    service = options.service.name if options is not None and options.service_id else None
    return {"address": backend.address, "port": backend.port, "service": service, **values}


def export() -> Json:
    """Every HTTP farm's options, certificate names, services and backend options, in a stable order."""
    farms = list(Farm.objects.filter(mode__in=L7_MODES).order_by("name"))
    ids = [farm.pk for farm in farms]
    options = {
        o.farm_id: o
        for o in L7Farm.objects.filter(farm_id__in=ids)
        .select_related("default_certificate")
        .prefetch_related("certificates")
    }
    services_of: dict[int, list[HttpService]] = defaultdict(list)
    for service in HttpService.objects.filter(farm_id__in=ids).order_by("position", "name"):
        services_of[service.farm_id].append(service)
    backend_options = {
        o.backend_id: o for o in L7Backend.objects.filter(backend__farm_id__in=ids).select_related("service")
    }
    backends_of: dict[int, list[Backend]] = defaultdict(list)
    for backend in Backend.objects.filter(farm_id__in=ids).order_by("address", "port"):
        backends_of[backend.farm_id].append(backend)
    entries = []
    for farm in farms:
        option = options.get(farm.pk)
        default = option.default_certificate.name if option is not None and option.default_certificate_id else None
        entries.append(
            {
                "farm": farm.name,
                "options": _options_of(option),
                "certificates": sorted(c.name for c in option.certificates.all()) if option is not None else [],
                "default_certificate": default,
                "services": [_values(s, services.SERVICE_FIELDS) for s in services_of[farm.pk]],
                "backends": [_backend_of(b, backend_options.get(b.pk)) for b in backends_of[farm.pk]],
            }
        )
    return {"farms": entries}


class _Loader:
    """Makes every HTTP farm equal to its entry; problems go into the import's errors where they are."""

    def __init__(self, result: ImportResult) -> None:
        self.result = result
        self.certificates = {c.name: c for c in Certificate.objects.all()}

    def error(self, location: str, field: str, message: str) -> None:
        self.result.errors.append(ImportError_(location, field, message))

    def attempt(self, location: str, write) -> bool:
        """One service call; a validation error is recorded at ``location`` (the import rolls back as a whole)."""
        try:
            write()
            return True
        except ValidationError as exc:
            self.result.errors.extend(validation_errors(location, exc))
            return False

    def fields_ok(self, location: str, model, fields: tuple[str, ...], item: Json) -> bool:
        """Only the service's own fields, each of a JSON type its model field holds (config_io's check): the
        services take nothing else, and ``clean()`` expects text where the model has text."""
        problems = [(name, f"Unknown field '{name}'.") for name in sorted(set(item) - set(fields))]
        problems += type_errors(model, {k: v for k, v in item.items() if k in fields})
        for name, message in problems:
            self.error(location, name, message)
        return not problems

    def certificate(self, location: str, field: str, name: Any) -> Certificate | None:
        if name in self.certificates:
            return self.certificates[name]
        self.error(
            location, field, f"Certificate '{name}' is not on this appliance: upload it first (documents carry "
            "no private keys).",
        )  # fmt: skip
        return None

    def run(self, data: Any) -> None:
        if not isinstance(data, dict) or set(data) != {"farms"} or not isinstance(data["farms"], list):
            self.error(KEY, "farms", 'Give the HTTP farms as {"farms": [...]}, and nothing else.')
            return
        farms = {f.name: f for f in Farm.objects.filter(mode__in=L7_MODES)}
        listed = set()
        for index, entry in enumerate(data["farms"]):
            location = f"{KEY}.farms[{index}]"
            if not isinstance(entry, dict):
                self.error(location, "__all__", "Must be an object.")
                continue
            for name in sorted(set(entry) - ENTRY_FIELDS):
                self.error(location, name, f"Unknown field '{name}'.")
            farm = farms.get(entry.get("farm"))
            if farm is None:
                self.error(location, "farm", f"No HTTP farm '{entry.get('farm')}' in the document's farms.")
                continue
            if farm.name in listed:
                self.error(location, "farm", f"Farm '{farm.name}' is listed twice.")
                continue
            listed.add(farm.name)
            self.farm(location, farm, entry)
        for name in sorted(set(farms) - listed):
            self.farm(KEY, farms[name], {})

    def farm(self, location: str, farm: Farm, entry: Json) -> None:
        changed = self.options(location, farm, entry)
        changed = self.services(location, farm, entry.get("services") or []) or changed
        changed = self.backends(location, farm, entry.get("backends") or []) or changed
        self.result.count(KEY, "updated" if changed else "unchanged", farm.name)

    def options(self, location: str, farm: Farm, entry: Json) -> bool:
        given = entry.get("options") or {}
        if not isinstance(given, dict):
            self.error(location, "options", "Must be an object of the farm's HTTP options.")
            return False
        values = {**_field_defaults(L7Farm, OPTION_FIELDS), **_as_the_api_reads(L7Farm, given)}
        fields_ok = self.fields_ok(f"{location}.options", L7Farm, OPTION_FIELDS, values)
        wanted = [self.certificate(location, "certificates", n) for n in entry.get("certificates") or []]
        default_name = entry.get("default_certificate")
        default = self.certificate(location, "default_certificate", default_name) if default_name else None
        if not fields_ok or None in wanted or (default_name and default is None):
            return False
        current = L7Farm.objects.filter(farm=farm).first()
        same = (
            _options_of(current) == values
            and sorted(c.name for c in (current.certificates.all() if current else []))
            == sorted(c.name for c in wanted)
            and (current.default_certificate_id if current else None) == (default.pk if default else None)
        )
        if same:
            return False
        return self.attempt(
            f"{location}.options",
            lambda: services.farm_options_update(farm=farm, certificates=wanted, default_certificate=default, **values),
        )

    def services(self, location: str, farm: Farm, entries: list) -> bool:
        existing = {s.name: s for s in HttpService.objects.filter(farm=farm)}
        wanted = {e.get("name"): e for e in entries if isinstance(e, dict)}
        changed = False
        for name, service in existing.items():
            if name not in wanted:
                changed = self.attempt(location, lambda s=service: services.service_delete(service=s)) or changed
        for index, entry in enumerate(entries):
            where = f"{location}.services[{index}]"
            if not isinstance(entry, dict):
                self.error(where, "__all__", "Must be an object.")
                continue
            if not self.fields_ok(where, HttpService, services.SERVICE_FIELDS, entry):
                continue
            values = {**_field_defaults(HttpService, services.SERVICE_FIELDS), **_as_the_api_reads(HttpService, entry)}
            service = existing.get(entry.get("name"))
            if service is None:
                changed = self.attempt(where, lambda v=values: services.service_create(farm=farm, **v)) or changed
            elif _values(service, services.SERVICE_FIELDS) != values:
                changed = (
                    self.attempt(where, lambda s=service, v=values: services.service_update(service=s, **v)) or changed
                )
        return changed

    def backends(self, location: str, farm: Farm, entries: list) -> bool:
        by_key = {(str(b.address), b.port): b for b in Backend.objects.filter(farm=farm).select_related("l7__service")}
        service_ids = {s.name: s for s in HttpService.objects.filter(farm=farm)}
        listed: dict[tuple[str, Any], Json] = {}
        for index, entry in enumerate(entries):
            where = f"{location}.backends[{index}]"
            if not isinstance(entry, dict):
                self.error(where, "__all__", "Must be an object.")
                continue
            key = (str(entry.get("address")), entry.get("port"))
            options = {k: v for k, v in entry.items() if k not in ("address", "port", "service")}
            if not self.fields_ok(where, L7Backend, BACKEND_FIELDS, options):
                continue
            entry = _as_the_api_reads(L7Backend, entry)
            if key not in by_key:
                self.error(where, "address", f"No backend {key[0]}:{key[1]} in farm '{farm.name}'.")
                continue
            listed[key] = {"where": where, **entry}
        changed = False
        for key, backend in by_key.items():
            entry = listed.get(key, {"where": location})
            where = entry.pop("where")
            service_name = entry.pop("service", None)
            entry.pop("address", None), entry.pop("port", None)
            values = {**_field_defaults(L7Backend, BACKEND_FIELDS), **entry}
            if service_name is not None and service_name not in service_ids:
                self.error(where, "service", f"No service '{service_name}' in farm '{farm.name}'.")
                continue
            current = getattr(backend, "l7", None)
            if _backend_of(backend, current) == {"address": backend.address, "port": backend.port,
                                                 "service": service_name, **values}:  # fmt: skip
                continue
            service = service_ids.get(service_name)
            changed = (
                self.attempt(
                    where,
                    lambda b=backend, s=service, v=values: services.backend_options_update(backend=b, service=s, **v),
                )  # fmt: skip
                or changed
            )
        return changed


def load(data: Any, result: ImportResult) -> None:
    _Loader(result).run(data)


def register() -> None:
    register_section(KEY, export, load)
