"""What keepalived's and conntrackd's configuration parsers take as one value, written down once.

The models' ``clean()`` refuses anything else with a message that names the field (the API, ``manage.py cluster
configure`` and the page say the same words), and the generators (``render.py``) refuse to write anything else,
so no value an operator types can become a keyword, a comment or a block in either file. Each rule comes from the
engine's own parser (keepalived 2.2's word splitter, conntrackd 1.4's flex lexer) and is proved against the
engines themselves: ``tests/cluster/test_cluster_fields.py`` (examples and a property-based run through ``keepalived
-t``, keepalived's dump and conntrackd's parser) and ``bench/fuzz/`` (the long run).

Each ``*_problem`` function returns why a value cannot be written, or None.
"""

from __future__ import annotations

import ipaddress
import re

AUTH_PASS_BYTES = 8  # RFC 3768's authentication data: keepalived cuts a longer password to its first 8 bytes
IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # IFNAMSIZ - 1; none of keepalived's comment, quote or block marks
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a host name (the default LBWEB_NODE_NAME)

# conntrackd's lexer reads a word as its own STRING token only when no earlier rule matches the whole word:
# its keywords (case as written), its patterns (as it writes them: any case, but persistent's last letter), and
# one to four hex digits (the start of an IPv6 address). Interface names are such words; one of these would be a
# syntax error.
CONNTRACKD_STRING = re.compile(r"[A-Za-z][A-Za-z0-9._-]*")
CONNTRACKD_PATTERNS = re.compile(r"(?i:on|off|yes|no|alarm|ftfw|nack|notrack)|(?i:persisten)T")
_KEYWORDS = """
    UNIX IPv4_address IPv6_address IPv4_Destination_Address IPv6_Destination_Address IPv4_interface
    IPv6_interface Interface Multicast UDP TCP HashSize RefreshTime CacheTimeout CommitTimeout HashLimit Path
    Backlog Group Port LogFile Syslog LockFile General Sync Stats SocketBufferSize SocketBufferSizeMaxGrown
    SocketBufferSizeMaxGrowth NetlinkBufferSize NetlinkBufferSizeMaxGrowth Mode ResendQueueSize Checksum
    ACKWindowSize for SYN_SENT SYN_RECV ESTABLISHED FIN_WAIT CLOSE_WAIT LAST_ACK TIME_WAIT CLOSE CLOSED LISTEN
    SndSocketBuffer RcvSocketBuffer Filter Protocol Address State Accept Ignore PurgeTimeout From Userspace
    Kernelspace EventIterationLimit Default PollSecs NetlinkOverrunResync Nice Scheduler Type Priority
    NetlinkEventsReliable DisableInternalCache DisableExternalCache Options TCPWindowTracking ExpectationSync
    ErrorQueueLength Helper QueueNum QueueLen Policy ExpectMax ExpectTimeout Systemd StartupResync
"""  # conntrackd 1.4.7's own words, as its lexer (read_config_lex.l) lists them
CONNTRACKD_KEYWORDS = frozenset(_KEYWORDS.split())


def auth_pass_problem(value: str) -> str | None:
    """keepalived's ``auth_pass``, written in double quotes (so ``#``, ``!``, spaces and braces stay in it)."""
    if any(not " " <= c <= "~" for c in value):
        return (
            "Printable ASCII only (letters, digits, spaces, punctuation): VRRP compares 8 bytes, and a "
            "line break or an accented letter is not what the other node's operator types."
        )
    if len(value.encode()) > AUTH_PASS_BYTES:
        return f"At most {AUTH_PASS_BYTES} characters: VRRPv2 carries 8 bytes, keepalived would cut the rest off."
    if '"' in value:
        return "No double quote: keepalived's quoted string cannot carry one."
    if value != value.strip():
        return "No space at either end (invisible when typed, and the other node must have the same password)."
    if value.endswith("\\"):
        return "Not ending in a backslash: keepalived reads it as escaping the closing quote."
    if value == "}":
        return "Not a lone '}': keepalived reads it as the end of the block, quoted or not."
    return None


def node_name_problem(value: str) -> str | None:
    """A node's name: keepalived's ``router_id`` (``lbweb-NAME``), a word of its own."""
    if not NODE_NAME.fullmatch(value):
        return "A host name: up to 64 letters, digits, '.', '-' or '_', starting with a letter or digit."
    return None


def interface_problem(value: str) -> str | None:
    """An interface name as Linux and keepalived take it (one word, no comment, quote or brace)."""
    if not IFNAME.fullmatch(value) or value in (".", ".."):
        return "An interface name: up to 15 letters, digits, '.', '-' or '_'."
    return None


def vrrp_interface_problem(value: str) -> str | None:
    """keepalived's instance ``interface``: any interface but the loopback ("cannot use a loopback interface")."""
    if value == "lo":
        return "Not the loopback interface: VRRP adverts go out on a real link (keepalived refuses lo)."
    return interface_problem(value)


def conntrackd_word_problem(value: str) -> str | None:
    """An interface name conntrackd's lexer reads as a name (its ``Interface`` takes no quotes)."""
    problem = interface_problem(value)
    if problem:
        return problem
    if not CONNTRACKD_STRING.fullmatch(value):
        return "conntrackd takes an interface name that starts with a letter: rename the link or use another."
    if value in CONNTRACKD_KEYWORDS or CONNTRACKD_PATTERNS.fullmatch(value) or re.fullmatch(r"[0-9a-fA-F]{1,4}", value):
        return f"conntrackd reads {value!r} as one of its own words, not as a name: rename the link or use another."
    return None


def address_problem(value: str) -> str | None:
    """A node's own address (keepalived's unicast source or peer, conntrackd's sync address)."""
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return "An IPv4 or IPv6 address."
    return _ip_problem(ip, value)


def interface_address_problem(value: str) -> str | None:
    """A floating address with its prefix length (``198.18.2.100/24``), as keepalived's ``virtual_ipaddress``."""
    try:
        if "/" not in value:
            raise ValueError
        ip = ipaddress.ip_interface(value).ip
    except ValueError:
        return "An address with its prefix length, e.g. 198.18.2.100/24."
    return _ip_problem(ip, value)


def _ip_problem(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, value: str) -> str | None:
    if "%" in value:
        return "No scope id ('%eth0'): keepalived and conntrackd take the address alone (the interface says where)."
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return f"An IPv4-mapped IPv6 address: write the IPv4 address itself ({ip.ipv4_mapped})."
    if ip.is_unspecified or ip.is_loopback or ip.is_multicast:
        return "A unicast address of a node on the link (not unspecified, loopback or multicast)."
    return None


def advert_problem(version: int, interval: float) -> str | None:
    """keepalived's ``advert_int``: whole seconds for VRRPv2; centiseconds for VRRPv3 (it rounds anything finer)."""
    if version == 2:
        if not 1 <= interval <= 255 or interval != int(interval):
            return "VRRPv2 adverts are whole seconds (1-255): use VRRPv3 for less."
        return None
    if not 0.01 <= interval <= 40.95:
        return "VRRPv3 adverts are 0.01 to 40.95 seconds apart."
    if abs(interval * 100 - round(interval * 100)) > 1e-6:
        return "VRRPv3 adverts are in hundredths of a second (keepalived would round it)."
    return None
