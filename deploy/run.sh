#!/usr/bin/env bash
# Fresh Debian 12 -> running appliance, in the foreground: set up (deploy/setup.sh), then every lbweb process
# under supervisord (deploy/supervisord.conf), each as the unprivileged user lbweb with only the capabilities it
# needs. A process that dies is restarted alone; Ctrl-C (SIGINT) or SIGTERM stops them all.
set -euo pipefail
cd "$(dirname "$0")/.."
app=$(pwd -P)

# lbweb must read the application. A checkout under a private directory (/root, a 0700 temporary directory) is
# out of its reach: then everything runs in a mount namespace of its own where the checkout is also seen at
# /run/lbweb-app, a path lbweb can reach; nothing changes outside, and the namespace ends with the processes.
# The state directory's real path names its runtime paths under /run (lbweb/paths.py): taken here, before any
# mount namespace below shows every clone at the same path.
if [ "${LBWEB_REEXEC:-}" != bound ]; then
  LBWEB_VAR_DIR_HOST=$(realpath -m "${LBWEB_VAR_DIR:-var}")
  export LBWEB_VAR_DIR_HOST
fi
if [ "${LBWEB_REEXEC:-}" != bound ] && ! setpriv --reuid=nobody --regid=nogroup --clear-groups \
  test -r "$app/manage.py" -a -x "$app/deploy" 2>/dev/null; then
  mkdir -p /run/lbweb-app
  exec env LBWEB_REEXEC=bound unshare --mount --propagation private -- \
    sh -c 'mount --bind "$1" /run/lbweb-app && exec /run/lbweb-app/deploy/run.sh' run.sh "$app"
fi
unset LBWEB_REEXEC

deploy/setup.sh
var=$(realpath -m "${LBWEB_VAR_DIR:-var}")
export LBWEB_APP="$app" LBWEB_VAR_DIR="$var"
export LBWEB_OWN_REDIS=$([ -z "${REDIS_URL:-}" ] && echo true || echo false)
# The command prober's socket: in a directory only lbweb's group may enter (healthd connects, lbweb-probe
# listens), one socket per state directory so that two checkouts running side by side keep their own.
install -d -o lbweb-probe -g lbweb -m 2750 /run/lbweb-prober
LBWEB_PROBER_SOCKET=$(.venv/bin/python lbweb/paths.py prober_socket)
# HTTP farms: HAProxy's configuration (written by the worker) and master socket, one directory per state
# directory too (the appliance's is /run/lbweb-haproxy).
LBWEB_HAPROXY_DIR=$(.venv/bin/python lbweb/paths.py haproxy_dir)
export LBWEB_PROBER_SOCKET LBWEB_HAPROXY_DIR
. deploy/lib.sh
lbweb_haproxy_dirs "$LBWEB_HAPROXY_DIR"
(umask 077 && deploy/privdrop lbweb "" .venv/bin/python manage.py ensure_admin)
(umask 077 && deploy/privdrop lbweb "" .venv/bin/python manage.py ensure_tls)  # self-signed, when var/tls/ has none
unset LBWEB_ADMIN_PASSWORD  # the running processes never see it

bind=${LBWEB_BIND:-0.0.0.0:8000}
host=${bind%:*}
if [ "$host" = 0.0.0.0 ]; then host=$(hostname -I 2>/dev/null | awk '{print $1}'); fi
echo "lbweb: open https://${host:-127.0.0.1}:${bind##*:}/  (API docs at /api/docs/)"
exec .venv/bin/python -m supervisor.supervisord -c deploy/supervisord.conf
