"""Import and export of nftlb JSON farm documents, so operators can move from nftlb or SKUDONET.

``reader`` and ``writer`` translate (pure), ``plans`` holds what a document asks for, ``schema`` the
attribute tables; ``service`` writes through :mod:`farms.services` in one transaction.
"""

from .plans import ImportPlan
from .reader import import_document
from .service import ImportResult, nftlb_import
from .writer import export_document

__all__ = ["ImportPlan", "ImportResult", "export_document", "import_document", "nftlb_import"]
