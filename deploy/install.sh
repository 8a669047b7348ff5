#!/usr/bin/env bash
# Install lbweb as a service (root, Debian 12 or 13): Debian packages, this checkout's code under /opt/lbweb with its
# own virtualenv, the users lbweb and lbweb-probe, /etc/lbweb/lbweb.env, and the systemd units of deploy/systemd
# under lbweb.target. Idempotent: running it again installs the checkout's current files and restarts lbweb.
#
#   deploy/install.sh [--prefix DIR] [--no-start]
#
#   --prefix DIR  application directory (default LBWEB_PREFIX or /opt/lbweb); the units are written with it
#   --no-start    install only: no daemon-reload, no enable, no start
#   LBWEB_UNIT_DIR (/etc/systemd/system), LBWEB_TMPFILES_DIR (/etc/tmpfiles.d), LBWEB_ETC_DIR (/etc/lbweb),
#   LBWEB_STATE_DIR (/var/lib/lbweb): elsewhere, for tests
#
# The tracked files of the checkout go into a new release directory beside the prefix (PREFIX-releases/ID, ID a hash
# of the files and of the Python version) that gets its .venv, node_modules and bytecode there, owned by root; then
# the prefix, a symbolic link, is switched to it with one rename, so a service never sees a half-built tree. An
# unchanged checkout reuses its release; the previous one stays for a rollback, older ones are removed.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
prefix=${LBWEB_PREFIX:-/opt/lbweb}
unit_dir=${LBWEB_UNIT_DIR:-/etc/systemd/system}
tmpfiles_dir=${LBWEB_TMPFILES_DIR:-/etc/tmpfiles.d}
etc_dir=${LBWEB_ETC_DIR:-/etc/lbweb}
state_dir=${LBWEB_STATE_DIR:-/var/lib/lbweb}
start=1
while (($#)); do
  case $1 in
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --no-start) start=0; shift ;;
    *) echo "usage: $0 [--prefix DIR] [--no-start]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "lbweb install: run as root" >&2; exit 1; }
case $prefix in /*) ;; *) echo "lbweb install: --prefix must be absolute" >&2; exit 2 ;; esac
if [ -e "$prefix" ] && [ ! -L "$prefix" ]; then
  echo "lbweb install: $prefix exists and is not the symbolic link this installer manages; move it away" >&2
  exit 1
fi
umask 022

. "$src/deploy/lib.sh"
lbweb_install_packages
lbweb_create_users /var/lib/lbweb

# The code: tracked files only (no .venv, var/, node_modules of the checkout).
releases="$prefix-releases"
mkdir -p "$releases"
stage=$(mktemp -d "$releases/.stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
git -C "$src" ls-files -z | tar -C "$src" --null --ignore-failed-read -T - -cf - | tar -C "$stage" -xf -
id=$(cd "$stage" && {
  find . -type f -printf '%m %p\n' | sort
  find . -type f -print0 | sort -z | xargs -0 sha256sum
  /usr/bin/python3 --version
} | sha256sum | cut -c1-16)
release="$releases/$id"
if [ -e "$release/.lbweb-release" ]; then
  echo "lbweb install: $release is already built"
else
  rm -rf "$release"
  mv "$stage" "$release"
  echo "lbweb install: building $release"
  /usr/bin/python3 -m venv "$release/.venv"
  "$release/.venv/bin/pip" install -q --disable-pip-version-check -r "$release/requirements.txt"
  (cd "$release" && npm ci --omit=dev --no-audit --no-fund --loglevel=error)
  "$release/.venv/bin/python" -m compileall -q -x '/(node_modules|\.venv)/' "$release"
  chown -R root:root "$release"
  chmod -R u+rwX,go+rX,go-w "$release"
  touch "$release/.lbweb-release"
fi
previous=$(readlink "$prefix" || true)
ln -sfn "$release" "$prefix.new"
mv -T "$prefix.new" "$prefix"
for old in "$releases"/*; do
  case $old in "$release" | "$previous") ;; *) rm -rf "$old" ;; esac
done

# Configuration and state: the environment file is the operator's (kept once written); state 0700 lbweb.
if [ ! -e "$etc_dir/lbweb.env" ]; then
  install -d -m 0750 -o root -g lbweb "$etc_dir"
  install -m 0640 -o root -g lbweb /dev/null "$etc_dir/lbweb.env"
  cat >"$etc_dir/lbweb.env" <<'ENV'
# lbweb's environment, read by every lbweb unit but lbweb-prober (docs/install.md: "Environment"). root:lbweb 0640.
# LBWEB_ADMIN_PASSWORD=   password of `admin`, set by lbweb-setup at every start (unset: generated once, printed in
#                         its journal); the running processes never see it
# ALLOWED_HOSTS=lb.example.org
# REDIS_URL=redis://127.0.0.1:6379/0   an external Redis: then lbweb-redis.service does not start
# DATABASE_URL=postgres://lbweb:secret@db.example.org/lbweb
ENV
fi
install -d -m 0700 -o lbweb -g lbweb "$state_dir"

# The units, with the application directory they run from, and the prober's socket directory (made at boot).
install_file() { # SOURCE TARGET: written beside the target, then renamed over it
  sed "s#/opt/lbweb#$prefix#g" "$1" >"$2.new"
  chmod 0644 "$2.new"
  mv -f "$2.new" "$2"
}
mkdir -p "$unit_dir" "$tmpfiles_dir"
for unit in "$src"/deploy/systemd/lbweb*.{service,socket,target}; do
  install_file "$unit" "$unit_dir/$(basename "$unit")"
done
install_file "$src/deploy/systemd/lbweb.tmpfiles" "$tmpfiles_dir/lbweb.conf"

if ((!start)); then
  echo "lbweb install: installed in $prefix (--no-start: units not enabled)"
elif [ ! -d /run/systemd/system ]; then
  echo "lbweb install: systemd is not PID 1 here: units installed in $unit_dir, not started" \
    "(on a machine booted with systemd: systemctl enable --now lbweb.target)"
else
  systemd-tmpfiles --create "$tmpfiles_dir/lbweb.conf"
  systemctl daemon-reload
  systemctl enable lbweb.target
  systemctl restart lbweb.target
  echo "lbweb install: lbweb.target started (systemctl list-units 'lbweb*'; journalctl -u 'lbweb*')"
fi
