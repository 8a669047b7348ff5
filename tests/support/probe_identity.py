"""A ``command`` health check that passes only where the prober keeps its promises.

It exits 0 when it runs as the user ``lbweb-probe``, with an empty environment (read from
/proc/self/environ: what execve gave it, before Python sets anything), no capabilities of any
kind, no_new_privs, cwd ``/`` and none of lbweb's groups; otherwise it exits 1 and says why on
stderr (healthd shows that as the backend's reason).
"""

import grp
import os
import pwd
import sys
from pathlib import Path

problems = []
user = pwd.getpwuid(os.getuid()).pw_name
if user != "lbweb-probe" or pwd.getpwuid(os.geteuid()).pw_name != "lbweb-probe":
    problems.append(f"runs as {user}")
environment = Path("/proc/self/environ").read_bytes()
if environment:
    names = sorted(item.split(b"=")[0].decode(errors="replace") for item in environment.split(b"\0") if item)
    problems.append(f"environment not empty: {' '.join(names)}")
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
for field in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
    if int(status[field], 16):
        problems.append(f"{field} {status[field].strip()}")
if status["NoNewPrivs"].strip() != "1":
    problems.append("no_new_privs is off")
groups = sorted(grp.getgrgid(gid).gr_name for gid in {os.getgid(), *os.getgroups()})
if any(name.startswith("lbweb") and name != "lbweb-probe" for name in groups) or "root" in groups:
    problems.append(f"in the groups {' '.join(groups)}")
if os.getcwd() != "/":
    problems.append(f"cwd {os.getcwd()}")
if problems:
    print("; ".join(problems), file=sys.stderr)
    sys.exit(1)
