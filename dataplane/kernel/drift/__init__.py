"""Drift: whether lbweb's tables still hold what lbweb wrote, unit by unit, and how to put it back.

Three concerns, a module each:

- ``record``: what the worker keeps of a unit after writing it (a fingerprint: a short hash of each of
  its objects as the kernel answered), and who owns which name;
- ``read``: lbweb's tables read back as netlink messages, whole or a few units by name, into records;
- ``repair``: what differs between two records, in words, and the messages that remove a drifted
  unit from the kernel, keeping its counters and dynamic sets when they are as lbweb wrote them.

What callers use is here; a tunable (``read.OBJECTS_BY_DUMP``) is set on the module that reads it.
"""

from .read import Reading, lbweb_netdev_tables, probe_records, read_kernel, read_table_hashes
from .record import (
    DSR_PREFIX,
    SKELETON,
    Owners,
    Record,
    element_owner,
    owners_of,
    table_record,
    unit_record,
    written_records,
)
from .repair import CannotRepair, differences, removal_messages, without_kept

__all__ = [
    "DSR_PREFIX",
    "SKELETON",
    "CannotRepair",
    "Owners",
    "Reading",
    "Record",
    "differences",
    "element_owner",
    "lbweb_netdev_tables",
    "owners_of",
    "probe_records",
    "read_kernel",
    "read_table_hashes",
    "removal_messages",
    "table_record",
    "unit_record",
    "without_kept",
    "written_records",
]
