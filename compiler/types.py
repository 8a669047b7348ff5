"""Type aliases shared by the compiler, the worker, the web and the collector (no Django here)."""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]  # a JSON object: an nftables command, a document, an API body, a metric sample
