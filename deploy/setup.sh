#!/usr/bin/env bash
# Bring this machine to an installed lbweb: Debian packages, the system users, virtualenv, front-end packages, and
# the state directory (database, static files, admin account), owned by the unprivileged user lbweb.
# Idempotent: every step checks before it acts, so running it again is safe.
set -euo pipefail
cd "$(dirname "$0")/.."
umask 022  # code, virtualenv and static files are read by lbweb; the state directory is made private below

. deploy/lib.sh
lbweb_install_packages

# lbweb's processes run as the system user lbweb; `command` health checks as lbweb-probe (nothing of lbweb's).
lbweb_create_users /var/lib/lbweb

# Debian's interpreter: lbweb must be able to execute it (an interpreter under /root, e.g. pyenv's, is out of its
# reach), so a virtualenv made from another one is made again.
PYTHON=${PYTHON:-/usr/bin/python3}
if [ -e .venv/pyvenv.cfg ] && ! grep -qx "home = $(dirname "$PYTHON")" .venv/pyvenv.cfg; then
  echo "lbweb setup: .venv was made with another Python than $PYTHON: making it again"
  rm -rf .venv
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
REQS=${LBWEB_REQUIREMENTS:-requirements.txt}
stamp=".venv/.installed-$(cat requirements*.txt | sha256sum | cut -c1-16)-$(basename "$REQS")"
if [ ! -e "$stamp" ]; then
  .venv/bin/pip install -q --disable-pip-version-check -r "$REQS"
  touch "$stamp"
fi

# Front-end packages (Chart.js) from npm, pinned by package-lock.json, served as static files.
npm_stamp="node_modules/.lbweb-$(sha256sum package-lock.json | cut -c1-16)"
if [ ! -e "$npm_stamp" ]; then
  npm ci --no-audit --no-fund --loglevel=error
  touch "$npm_stamp"
fi

# The state directory holds the database (with API tokens), the secret key and the TLS key: lbweb's alone.
var=$(realpath -m "${LBWEB_VAR_DIR:-var}")
mkdir -p "$var"
chown -R lbweb:lbweb "$var"
chmod -R go= "$var"
export LBWEB_VAR_DIR="$var"
as_lbweb() { (umask 077 && deploy/privdrop lbweb "" "$@"); }
as_lbweb .venv/bin/python manage.py migrate --noinput -v0
as_lbweb .venv/bin/python manage.py collectstatic --noinput -v0
