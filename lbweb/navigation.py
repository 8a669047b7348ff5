"""Which section of the main menu a page belongs to, so the menu can mark it (``aria-current="page"``).

By path prefix rather than URL name: a page added under a section (``/system/network/``, a farm's
health check under ``/farms/``) is highlighted by its place in the tree with nothing to register.
"""

from __future__ import annotations

# (section, path prefixes), most specific first; "/" alone is the farm list.
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("policies", ("/policies/",)),
    ("http", ("/http/",)),
    ("dashboard", ("/monitoring/",)),
    ("apply-runs", ("/apply-runs/",)),
    ("audit", ("/audit-events/",)),
    ("history", ("/config/versions/",)),
    ("config", ("/config/",)),
    ("cluster", ("/cluster/", "/bgp/")),
    ("system", ("/system/",)),
    ("api", ("/api/docs/", "/api/redoc/")),
    ("farms", ("/farms/", "/backends/")),
)


def section_of(path: str) -> str | None:
    """The menu section of ``path`` (None for pages outside the menu: login, password, admin)."""
    if path == "/":
        return "farms"
    return next((name for name, prefixes in SECTIONS if path.startswith(prefixes)), None)


def navigation_context(request) -> dict:
    return {"nav_section": section_of(getattr(request, "path", "") or "")}
