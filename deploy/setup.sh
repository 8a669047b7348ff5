#!/usr/bin/env bash
# Bring this machine to an installed lbweb: Debian packages, virtualenv, database, admin account, static files.
# Idempotent: every step checks before it acts, so running it again is safe.
set -euo pipefail
cd "$(dirname "$0")/.."

. deploy/lib.sh
lbweb_install_packages

PYTHON=${PYTHON:-python3}
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

mkdir -p "${LBWEB_VAR_DIR:-var}"
.venv/bin/python manage.py migrate --noinput -v0
.venv/bin/python manage.py collectstatic --noinput -v0
