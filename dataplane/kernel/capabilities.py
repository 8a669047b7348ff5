"""What this kernel can do, found by dry runs (``Interface.check``) of small documents: nothing is committed.

Above the Kernel interface, not in it: any kernel that can check a document answers the same way, the
real one (each probe a dry run in the kernel writer) and the fake (which refuses what it was made without).
"""

from __future__ import annotations

from compiler.spec import HELPER_PROTOCOL
from compiler.types import Json

from .interface import ApplyError, Interface

PROBE_TABLE = {"family": "inet", "table": "lbweb-probe"}


def probes() -> dict[str, list[Json]]:
    """Each capability's probe: the commands that need it, in a scratch table of their own."""
    found = {
        "flowtable": [{"add": {"flowtable": {**PROBE_TABLE, "name": "ft", "hook": "ingress", "prio": 0, "dev": []}}}],
    }
    for helper, proto in HELPER_PROTOCOL.items():
        body = {**PROBE_TABLE, "name": "h", "type": helper, "protocol": proto}
        found[f"helper-{helper}"] = [{"add": {"ct helper": body}}]
    # A farm without an active backend, and limit verdict 'reject', reject in the nat prerouting hook.
    nat = {**PROBE_TABLE, "name": "n", "type": "nat", "hook": "prerouting", "prio": -100}
    rule = {**PROBE_TABLE, "chain": "n", "expr": [{"reject": {"type": "tcp reset"}}]}
    found["reject-nat"] = [{"add": {"chain": nat}}, {"add": {"rule": rule}}]
    return found


def probe(kernel: Interface) -> dict[str, bool]:
    """What ``kernel`` can do (flowtables, each conntrack helper, reject in nat prerouting)."""
    result = {}
    for name, commands in probes().items():
        document = {"nftables": [{"add": {"table": {"family": "inet", "name": "lbweb-probe"}}}, *commands]}
        try:
            kernel.check(document)
            result[name] = True
        except ApplyError:
            result[name] = False
    return result
