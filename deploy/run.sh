#!/usr/bin/env bash
# Fresh Debian 12 -> running appliance: set up, then web + worker + beat + healthd (+ its own Redis) under honcho.
# Ctrl-C stops every process.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup.sh
.venv/bin/python manage.py ensure_admin
.venv/bin/python manage.py ensure_tls   # self-signed certificate under var/tls/ when there is none

procs=(web redirect worker beat healthd collector)
if [ -z "${REDIS_URL:-}" ]; then
  procs=(redis "${procs[@]}")   # lbweb's own Redis on a unix socket under var/
fi
bind=${LBWEB_BIND:-0.0.0.0:8000}
echo "lbweb: open https://$( [ "${bind%:*}" = 0.0.0.0 ] && hostname -I 2>/dev/null | awk '{print $1}' || echo "${bind%:*}" ):${bind##*:}/  (API docs at /api/docs/)"
exec .venv/bin/honcho -f Procfile start "${procs[@]}"
