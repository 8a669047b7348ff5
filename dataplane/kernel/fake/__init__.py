"""FakeKernel: nf_tables in memory, for testing the Applier's logic without root and without a kernel.

``kernel``: the fake (:class:`FakeKernel`) and the calls it records; ``table``: its tables and how a
document's commands change them; ``records``: its drift records and readings.
"""

from .kernel import Call, FakeKernel
from .records import FakeReading
from .table import Table

__all__ = ["Call", "FakeKernel", "FakeReading", "Table"]
