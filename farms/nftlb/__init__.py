"""Import and export of nftlb JSON farm documents, so operators can move from nftlb or SKUDONET.

``document`` translates (pure), ``schema`` holds the attribute tables, ``service`` writes through
:mod:`farms.services` in one transaction.
"""

from .document import ImportPlan, export_document, import_document
from .service import ImportResult, nftlb_import

__all__ = ["ImportPlan", "ImportResult", "export_document", "import_document", "nftlb_import"]
