#!/usr/bin/env bash
# Install what the tests need, lint, and run the whole suite (root: the data-plane tests build network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
# openssl: the health tests make a self-signed certificate; chromium: the browser tests drive Debian's build through
# Playwright (never `playwright install`); systemd: systemd-analyze, systemd-socket-activate and systemd-tmpfiles check
# deploy/systemd's units where systemd is not running; prometheus: the exposition tests; mmdebstrap, qemu and OVMF:
# the appliance image's build and its test under qemu (tests/deploy/test_image.py); pebble: the ACME test server of
# tests/dataplane/test_l7_acme.py; slapd, ldap-utils and freeradius: the directories the login tests start on ports of their own
# (tests/support/auth_servers.py). Their own services are not needed: they are disabled (and stopped where systemd runs),
# also because systemd-analyze verify of lbweb's units loads what multi-user.target wants, and Debian 12's
# freeradius.service warns there (tests/deploy/test_install.py).
LBWEB_EXTRA_APT="${LBWEB_EXTRA_APT:-} openssl chromium systemd prometheus mmdebstrap qemu-system-x86 qemu-utils ovmf pebble slapd ldap-utils freeradius" LBWEB_REQUIREMENTS=requirements-test.txt deploy/setup.sh
systemctl disable --now slapd freeradius >/dev/null 2>&1 || systemctl disable slapd freeradius >/dev/null 2>&1 || true
.venv/bin/python bench/dataplane.py --install-only   # wrk, nginx, HAProxy, matplotlib for the bench's smoke test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports --no-cache   # import contracts (pyproject.toml): the compiler is pure, the web imports no kernel I/O
exec .venv/bin/pytest "$@"
