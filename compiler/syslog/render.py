"""rsyslog's configuration for lbweb's remote syslog: pure, deterministic, golden-tested.

    rsyslogd -n -N1 -f rsyslog.conf      (the worker checks each file so before it is used)

rsyslog reads three inputs, each bound to a ruleset that names the kind of event (its RFC 5424 MSGID):

* ``events_socket``: lbweb's own processes send RFC 5424 messages (``lbweb/syslog_events.py``) with the MSGID of
  their kind (audit, apply, health, cluster) and their details as structured data;
* ``access_socket``: HAProxy sends its access log of HTTP farms (``format rfc5424``): MSGID ``http-access``;
* the kernel's log (``imkmsg``, ``/dev/kmsg``, only when a server takes farm-log): netfilter's lines (``IN=... OUT=``),
  the log statements of farms that log (nftlb's ``IN-``, ``FWD-``, ``OUT-`` prefixes): MSGID ``farm-log``.
  imkmsg reads the kernel's whole buffer when rsyslog starts: only lines from the second the previous rsyslog
  stopped on are sent (``SINCE_ENV``, given by ``dataplane/syslog/run.py``), so a restart sends none twice.

Every server gets its kinds in one RFC 5424 template whose HOSTNAME is this host's name, over UDP, TCP
(octet-counted framing, RFC 6587) or TLS (RFC 5425, GnuTLS, the server's certificate checked against a CA), each
through its own queue, so one server down never holds back another.

No value here comes unchecked: each goes through ``grammar`` and ``render`` raises on any other (see grammar.py).
"""

from __future__ import annotations

from . import grammar
from .spec import APPLY, AUDIT, CLUSTER, FARM_LOG, HEALTH, HTTP_ACCESS, ServerSpec, SyslogSpec

CONFIG_NAME = "rsyslog.conf"
SINCE_ENV = "LBWEB_SYSLOG_SINCE"  # set by dataplane/syslog/run.py: when the rsyslog before this one stopped
QUEUE_SIZE = 20000  # messages an unreachable server's queue holds (memory); the oldest are dropped beyond
MAX_MESSAGE = "64k"  # an audit entry's structured data can exceed rsyslog's 8k default
LBWEB_KINDS = (AUDIT, APPLY, HEALTH, CLUSTER)


class UnsafeValue(ValueError):
    """A value the grammar refuses: rendering stops rather than write it."""


def _checked(problem, value, what: str):
    reason = problem(value)
    if reason:
        raise UnsafeValue(f"{what} {value!r}: {reason}")
    return value


def _target(server: ServerSpec) -> str:
    host = _checked(grammar.host_problem, server.host, f"server {server.id} host")
    _checked(grammar.port_problem, server.port, f"server {server.id} port")
    _checked(grammar.transport_problem, server.transport, f"server {server.id} transport")
    _checked(grammar.kinds_problem, server.kinds, f"server {server.id} kinds")
    return host


def _action(server: ServerSpec) -> list[str]:
    host = _target(server)
    protocol = "udp" if server.transport == "udp" else "tcp"
    lines = [
        "action(",
        '    type="omfwd"',
        f'    name="lbweb-server-{int(server.id)}"',
        f'    target="{host}"',
        f'    port="{int(server.port)}"',
        f'    protocol="{protocol}"',
        '    template="lbweb-rfc5424"',
    ]
    if protocol == "tcp":
        lines.append('    tcp_framing="octet-counted"')
    if server.transport == "tls":
        ca_file = _checked(grammar.path_problem, server.ca_file, f"server {server.id} CA file")
        lines += ['    streamDriver="gtls"', '    streamDriverMode="1"', f'    streamDriver.CAFile="{ca_file}"']
        if server.peer_name:
            peer = _checked(grammar.peer_name_problem, server.peer_name, f"server {server.id} peer name")
            lines += ['    streamDriverAuthMode="x509/name"', f'    streamDriverPermittedPeers="{peer}"']
        else:
            lines.append('    streamDriverAuthMode="x509/certvalid"')
    lines += [
        '    queue.type="LinkedList"',
        f'    queue.size="{QUEUE_SIZE}"',
        '    queue.discardMark="19000"',
        '    action.resumeRetryCount="-1"',
        '    action.resumeInterval="5"',
        ")",
    ]
    return lines


def _condition(kinds: tuple[str, ...], variable: str = "$.msgid") -> str:
    return " or ".join(f'{variable} == "{kind}"' for kind in sorted(kinds))


def _forward(servers: tuple[ServerSpec, ...]) -> list[str]:
    lines = ['ruleset(name="lbweb-forward") {']
    for server in sorted(servers, key=lambda s: s.id):
        if not server.kinds:
            continue
        action = _action(server)
        lines += [f"    # server {int(server.id)}", f"    if {_condition(server.kinds)} then {{"]
        lines += [f"        {line}" for line in action]
        lines.append("    }")
    lines.append("}")
    return lines


def rsyslog_conf(spec: SyslogSpec) -> str:
    """The whole file; raises :class:`UnsafeValue` rather than write a value the grammar refuses."""
    events = _checked(grammar.path_problem, spec.events_socket, "events socket")
    access = _checked(grammar.path_problem, spec.access_socket, "access log socket")
    work = _checked(grammar.path_problem, spec.work_dir, "work directory")
    lines = [
        "# Written by lbweb's worker from its database (System > Remote syslog); edits are lost at the next apply.",
        "# Generator: compiler/syslog/render.py. Checked with rsyslogd -N1 before use.",
        f'global(workDirectory="{work}" maxMessageSize="{MAX_MESSAGE}")',
        "",
        "# RFC 5424, HOSTNAME this host's name, MSGID the kind of event (set by each input's ruleset).",
        'template(name="lbweb-rfc5424" type="list") {',
        '    constant(value="<") property(name="pri") constant(value=">1 ")',
        '    property(name="timereported" dateFormat="rfc3339") constant(value=" ")',
        '    property(name="$myhostname") constant(value=" ")',
        '    property(name="app-name") constant(value=" ")',
        '    property(name="procid") constant(value=" ")',
        '    property(name="$.msgid") constant(value=" ")',
        '    property(name="structured-data") constant(value=" ")',
        '    property(name="msg" droplastlf="on")',
        "}",
        "",
        "# Local inputs only: nothing here listens on the network. No system socket (/dev/log stays the host's).",
        'module(load="imuxsock" SysSock.Use="off")',
        f'input(type="imuxsock" Socket="{events}" UseSpecialParser="off" ParseHostname="on"',
        '      RateLimit.Interval="0" Ruleset="lbweb-events")',
        f'input(type="imuxsock" Socket="{access}" UseSpecialParser="off" ParseHostname="on"',
        '      RateLimit.Interval="0" Ruleset="lbweb-access")',
    ]
    if spec.reads_kernel:
        lines += [
            'module(load="imkmsg")',
            'template(name="lbweb-reported" type="list") { property(name="timereported" dateFormat="unixtimestamp") }',
        ]
    lines += [
        "",
        *_forward(spec.servers),
        "",
        "# lbweb's processes: the MSGID they gave (audit, apply, health, cluster), and only those.",
        'ruleset(name="lbweb-events") {',
        f"    if {_condition(LBWEB_KINDS, '$msgid')} then {{",
        "        set $.msgid = $msgid;",
        "        call lbweb-forward",
        "    }",
        "}",
        "",
        "# HAProxy's access log of HTTP farms.",
        'ruleset(name="lbweb-access") {',
        f'    set $.msgid = "{HTTP_ACCESS}";',
        "    call lbweb-forward",
        "}",
    ]
    if spec.reads_kernel:
        lines += [
            "",
            "# The kernel: netfilter's log lines (farms that log), not the backlog sent before a restart.",
            'if $syslogfacility-text == "kern" and re_match($msg, "(^| )IN=[^ ]* OUT=") then {',
            f'    if cnum(exec_template("lbweb-reported")) >= cnum(getenv("{SINCE_ENV}")) then {{',
            f'        set $.msgid = "{FARM_LOG}";',
            "        call lbweb-forward",
            "    }",
            "}",
        ]
    return "\n".join(lines) + "\n"
