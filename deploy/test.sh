#!/usr/bin/env bash
# Install what the tests need, lint, and run the whole suite (root: the data-plane tests build network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
# openssl: the health tests make a self-signed certificate for an HTTPS backend
LBWEB_EXTRA_APT="openssl ${LBWEB_EXTRA_APT:-}" LBWEB_REQUIREMENTS=requirements-test.txt deploy/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/pytest "$@"
