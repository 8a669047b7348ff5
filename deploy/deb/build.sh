#!/usr/bin/env bash
# Build lbweb's Debian package, lbweb_VERSION_amd64.deb, for the Debian release of this machine (its Python).
#
#   deploy/deb/build.sh [--rev REV] [--out DIR]
#
#   --rev  package that commit's application (git archive REV) instead of this checkout's tracked files; the
#          packaging (this directory) is always the checkout's. The upgrade test builds an older lbweb this way.
#   --out  where the .deb goes (default dist/)
#
# The package holds /opt/lbweb (the application, its virtualenv built here with Debian's /usr/bin/python3 and the
# pinned requirements.txt, the front-end packages of package-lock.json, bytecode), the systemd units of
# deploy/systemd and deploy/systemd/lbweb.tmpfiles. Its Depends are deploy/lib.sh's LBWEB_APT_PACKAGES, so
# `apt install ./lbweb_*.deb` needs nothing but Debian's packages: no pip, no npm, no network beyond apt.
# Root is needed: the virtualenv is built at its final path /opt/lbweb inside a private mount namespace (a
# virtualenv is not relocatable), so nothing on this machine's /opt changes.
set -euo pipefail
if [ -z "${LBWEB_DEB_NS:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "lbweb deb: run as root" >&2; exit 1; }
  LBWEB_DEB_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
rev=
out=$src/dist
while (($#)); do
  case $1 in
    --rev) rev=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    *) echo "usage: $0 [--rev REV] [--out DIR]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(realpath "$out")
work=$(mktemp -d /var/tmp/lbweb-deb.XXXXXX)
host_opt=$(mktemp -d /run/lbweb-deb-opt.XXXXXX) # never under $work: rm -rf must not reach the host's /opt
trap 'umount -R -l /opt 2>/dev/null; umount -l "$host_opt" 2>/dev/null; rmdir "$host_opt"; rm -rf "$work"' EXIT
umask 022
root=$work/root
app=$root/opt/lbweb
mkdir -p "$app" "$root/DEBIAN"

# The application: tracked files (of REV, or of the checkout as they are now), without the tests and benches.
if [ -n "$rev" ]; then
  git -C "$src" archive --format=tar "$rev" | tar -C "$app" -xf -
  commit=$rev
else
  git -C "$src" ls-files -z | tar -C "$src" --null --ignore-failed-read -T - -cf - | tar -C "$app" -xf -
  commit=HEAD
fi
# (Some old commits tracked .venv and node_modules as symbolic links: both are made here.)
rm -rf "$app/tests" "$app/bench" "$app/.ci" "$app/deploy/image" "$app/deploy/deb" "$app/.venv" "$app/node_modules"

# Version: the project's, then the commit's time and hash, so a later commit is a newer package (apt upgrades).
base_version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$app/pyproject.toml")
stamp=$(TZ=UTC git -C "$src" log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S "$commit")
hash=$(git -C "$src" rev-parse --short=10 "$commit")
version=$base_version+git$stamp.$hash
if [ -z "$rev" ] && [ -n "$(git -C "$src" status --porcelain --untracked-files=no)" ]; then
  version=$version.local$(date -u +%Y%m%d%H%M%S) # uncommitted changes: newer than the commit's own package
fi

# The virtualenv at its final path, seen through a bind mount of the package tree over /opt.
python=/usr/bin/python3
pyver=$($python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
# /opt itself stays as it is for everything else (pip may find wheels there): a tmpfs over it shows each of its
# entries again through a bind mount, and /opt/lbweb is the package tree.
mount --bind /opt "$host_opt"
mount -t tmpfs -o mode=0755 lbweb-deb-opt /opt
for entry in "$host_opt"/* "$host_opt"/.[!.]*; do
  [ -e "$entry" ] || continue
  if [ -d "$entry" ]; then mkdir "/opt/${entry##*/}"; else touch "/opt/${entry##*/}"; fi
  mount --bind "$entry" "/opt/${entry##*/}"
done
mkdir /opt/lbweb
mount --bind "$app" /opt/lbweb
# shellcheck disable=SC1091
(. "$app/deploy/lib.sh" && lbweb_apt_install "${LBWEB_BUILD_APT_PACKAGES[@]}") # python-ldap is compiled here
$python -m venv /opt/lbweb/.venv
/opt/lbweb/.venv/bin/pip install -qq --disable-pip-version-check --no-compile -r /opt/lbweb/requirements.txt
(cd /opt/lbweb && npm ci --omit=dev --no-audit --no-fund --loglevel=error)
/opt/lbweb/.venv/bin/python -m compileall -q -x '/node_modules/' /opt/lbweb >/dev/null
rm -rf "$app/.venv/bin/Activate.ps1"

# The units and the prober's runtime directory.
install -d "$root/lib/systemd/system" "$root/usr/lib/tmpfiles.d" "$root/usr/share/doc/lbweb"
for unit in "$app"/deploy/systemd/lbweb*.service "$app"/deploy/systemd/lbweb*.socket \
  "$app"/deploy/systemd/lbweb*.target "$app"/deploy/systemd/lbweb*.timer; do
  [ -e "$unit" ] && install -m 0644 "$unit" "$root/lib/systemd/system/"
done
install -m 0644 "$app/deploy/systemd/lbweb.tmpfiles" "$root/usr/lib/tmpfiles.d/lbweb.conf"
printf 'lbweb %s, packaged by deploy/deb/build.sh from %s.\n' "$version" "$hash" >"$root/usr/share/doc/lbweb/README.Debian"

# Depends: the Debian packages lbweb runs on, as that version of deploy/lib.sh lists them (the virtualenv
# is built, not made on the target: python3-venv and python3-pip stay out), and this Python's minor version.
# tzdata always: Django and Celery load the UTC zone through zoneinfo, which reads /usr/share/zoneinfo (the
# virtualenv has no tzdata wheel); a minimal Debian lacks it, and without it the API's login answered 500 and
# the worker and beat exited at start (seen in the image; lib.sh lists it since, older commits did not).
depends=$(
  # shellcheck disable=SC1091
  . "$app/deploy/lib.sh"
  seen=" python3-venv python3-pip python3 "
  for pkg in "${LBWEB_APT_PACKAGES[@]}" tzdata; do
    case $seen in *" $pkg "*) continue ;; esac
    seen="$seen$pkg "
    printf ', %s' "$pkg"
  done
)
# And the Debian packages of the system libraries the virtualenv's compiled modules load (python-ldap links libldap,
# whose package is named by the release: libldap-2.5-0 on Debian 12), as ldd and dpkg name them on this machine.
for lib in $(find "$app/.venv" -name '*.so' -print0 | xargs -0 ldd 2>/dev/null | awk '$3 ~ /^\// {print $3}' | sort -u); do
  case $lib in /opt/lbweb/* | "$app"/*) continue ;; esac
  pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(realpath "$lib")" 2>/dev/null || true)
  pkg=${pkg%%:*}
  [ -n "$pkg" ] || continue
  case $depends, in *", $pkg,"*) continue ;; esac
  depends="$depends, $pkg"
done
next=${pyver%.*}.$((${pyver#*.} + 1))
cat >"$root/DEBIAN/control" <<EOF
Package: lbweb
Version: $version
Architecture: $(dpkg --print-architecture)
Maintainer: lbweb developers <lbweb@localhost>
Section: net
Priority: optional
Depends: python3 (>= $pyver), python3 (<< $next), python$pyver$depends
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Description: kernel (nftables + conntrack) load-balancer appliance, control plane
 lbweb stores farms (a VIP, ports, a mode, a scheduler, backends) and has the
 kernel move the packets: every change is compiled into one nftables
 transaction. Web UI and REST API over HTTPS, health checks, metrics.
EOF
for script in postinst prerm postrm; do
  install -m 0755 "$here/$script" "$root/DEBIAN/$script"
done
chown -R root:root "$root"
chmod -R u+rwX,go+rX,go-w "$root"
deb=$out/lbweb_${version}_$(dpkg --print-architecture).deb
dpkg-deb --root-owner-group -Zgzip --build "$root" "$deb" >/dev/null
echo "$deb"
