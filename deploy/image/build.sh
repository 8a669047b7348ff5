#!/usr/bin/env bash
# Build the lbweb appliance image: one disk that boots with BIOS and with UEFI (raw and qcow2), from Debian's packages
# only, with lbweb installed from the .deb this project builds (deploy/deb/build.sh).
#
#   deploy/image/build.sh [--suite bookworm] [--deb FILE] [--out DIR] [--cache DIR] [--size 4G]
#
#   --suite   the Debian release (default bookworm: see "Why Debian 12" in docs/install.md)
#   --deb     lbweb's package to install (default: built now from this checkout)
#   --out     where the image goes (default dist/image): lbweb-VERSION.raw, .qcow2, and the kernel, initrd and
#             kernel command line of the image, to boot it straight from qemu (-kernel/-initrd/-append)
#   --cache   the base system (mmdebstrap of deploy/image/packages.txt) is kept here, keyed by the suite, the
#             package list and the host's apt sources: a second build only installs the .deb (default
#             LBWEB_IMAGE_CACHE or /var/cache/lbweb-image)
#
# Packages come from the host's own apt sources (/etc/apt/sources.list*), read at build time. Root is needed:
# the disk is written through a loop device. Everything mounted here lives in a mount namespace of its own.
set -euo pipefail
if [ -z "${LBWEB_IMAGE_NS:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "lbweb image: run as root" >&2; exit 1; }
  LBWEB_IMAGE_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
suite=bookworm
deb=
out=$src/dist/image
cache=${LBWEB_IMAGE_CACHE:-/var/cache/lbweb-image}
size=4G
while (($#)); do
  case $1 in
    --suite) suite=${2:?}; shift 2 ;;
    --deb) deb=$(realpath "${2:?}"); shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --cache) cache=${2:?}; shift 2 ;;
    --size) size=${2:?}; shift 2 ;;
    *) echo "usage: $0 [--suite S] [--deb FILE] [--out DIR] [--cache DIR] [--size SIZE]" >&2; exit 2 ;;
  esac
done
started=$(date +%s)
log() { echo "lbweb image [$(($(date +%s) - started)) s]: $*"; }
mkdir -p "$out" "$cache"
out=$(realpath "$out")
work=$(mktemp -d /var/tmp/lbweb-image.XXXXXX)
loop=
cleanup() {
  set +e
  for m in $(awk -v w="$work" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r); do umount -l "$m"; done
  [ -n "$loop" ] && losetup -d "$loop"
  rm -rf "$work"
}
trap cleanup EXIT

# The host's apt sources for Debian (no mirror is named here), for another suite with the codename replaced.
host_codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
sources=()
for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -f "$file" ] && grep -Eq '^[^#]*(/debian(-security)?/?( |$)|debian-archive-keyring)' "$file" || continue
  copy=$work/sources-${#sources[@]}.${file##*.}
  sed -E "s/\\b$host_codename\\b/$suite/g" "$file" >"$copy"
  sources+=("$copy")
done
((${#sources[@]})) || { echo "lbweb image: no Debian apt source on this host" >&2; exit 1; }

# 1. The base system, cached.
packages=$(grep -v '^#' "$here/packages.txt" | xargs | tr ' ' ,)
key=$( {
  echo "$suite $packages"
  cat "${sources[@]}"
  sed -n '/^# base recipe:/,/^# end of base recipe/p' "$0"
} | sha256sum | cut -c1-16)
base=$cache/base-$suite-$key.tar
# One build at a time reads or writes the cache, until its base is unpacked: two at once wrote the same .part file.
exec 8>"$cache/.lock"
flock 8
# base recipe: what goes into the cached tarball (this block is part of the cache key)
if [ ! -e "$base" ]; then
  log "building the base system ($suite) into $base"
  mmdebstrap --variant=apt --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='chroot "$1" systemctl disable haproxy.service keepalived.service conntrackd.service bird.service redis-server.service rsyslog.service ssh.service' \
    --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
    --format=tar "$suite" "$base.part" "${sources[@]}"
  mv "$base.part" "$base"
  rm -rf "$cache"/base-*.part
  ls -t "$cache"/base-"$suite"-*.tar | tail -n +3 | xargs -r rm -f # the two newest stay
else
  log "base system from the cache: $base"
fi
# end of base recipe

# 2. lbweb's package and the appliance's own files on top.
if [ -z "$deb" ]; then
  log "building lbweb's package"
  "$src/deploy/deb/build.sh" --out "$work/deb" >"$work/deb.log" 2>&1 || { cat "$work/deb.log" >&2; exit 1; }
  deb=$(ls "$work"/deb/lbweb_*.deb)
fi
version=$(dpkg-deb -f "$deb" Version)
tree=$work/tree
mkdir "$tree"
tar -C "$tree" --xattrs --xattrs-include='*' -xf "$base"
flock -u 8
mount -t proc proc "$tree/proc"
mount --rbind /sys "$tree/sys"
mount --rbind /dev "$tree/dev"
cp "$deb" "$tree/tmp/"
cp /etc/resolv.conf "$tree/etc/resolv.conf"
log "installing $(basename "$deb")"
# The base holds every dependency (packages.txt) and no package lists (mmdebstrap removes them); a package that
# gained a dependency since makes apt fetch the lists once, from the same sources.
install_deb() {
  chroot "$tree" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "/tmp/$(basename "$deb")" >>"$work/apt.log" 2>&1
}
if ! install_deb; then
  log "a dependency is not in the base system: apt-get update, then again (add it to packages.txt)"
  chroot "$tree" apt-get update -q >>"$work/apt.log" 2>&1 && install_deb || { cat "$work/apt.log" >&2; exit 1; }
fi
rm -f "$tree/tmp/$(basename "$deb")" "$tree/etc/resolv.conf"
chroot "$tree" apt-get clean
rm -rf "$tree"/var/lib/apt/lists/* # (as mmdebstrap leaves it, when the fallback above fetched them)
cp -a "$here/overlay/." "$tree/"
chroot "$tree" systemctl enable lbweb-firstboot.service lbweb-announce.service systemd-networkd.service serial-getty@ttyS0.service \
  >/dev/null 2>&1
# systemd's own first-boot wizard would ask for a locale and a root password on the console: lbweb's asks instead.
chroot "$tree" systemctl mask systemd-firstboot.service >/dev/null 2>&1
echo lbweb >"$tree/etc/hostname"
printf 'uninitialized\n' >"$tree/etc/machine-id"
rm -f "$tree/var/lib/dbus/machine-id"
echo "$version" >"$tree/etc/lbweb-image-version"
umount -l "$tree/proc" "$tree/sys" "$tree/dev"

# 3. The disk: partitioned, formatted and made bootable by the image's own tools (the installer's script).
raw=$out/lbweb-$version.raw
rm -f "$raw"
truncate -s "$size" "$raw"
loop=$(losetup -P --show -f "$raw")
log "writing the disk ($size) through $loop"
mount --rbind /dev "$tree/dev"
mount -t proc proc "$tree/proc"
mount --rbind /sys "$tree/sys"
chroot "$tree" /usr/lib/lbweb-appliance/write-disk / "$loop" /mnt
root_uuid=$(blkid -s UUID -o value "${loop}p3")
umount -l "$tree/proc" "$tree/sys" "$tree/dev"
losetup -d "$loop"
loop=
log "converting to qcow2"
qemu-img convert -c -O qcow2 "$raw" "$out/lbweb-$version.qcow2"
cp "$tree"/boot/vmlinuz-* "$out/lbweb-$version.vmlinuz"
cp "$tree"/boot/initrd.img-* "$out/lbweb-$version.initrd"
ln -sfn "lbweb-$version.raw" "$out/lbweb.raw"
ln -sfn "lbweb-$version.qcow2" "$out/lbweb.qcow2"
ln -sfn "lbweb-$version.vmlinuz" "$out/lbweb.vmlinuz"
ln -sfn "lbweb-$version.initrd" "$out/lbweb.initrd"
echo "root=UUID=$root_uuid ro console=tty0 console=ttyS0,115200n8" >"$out/lbweb-$version.cmdline"
ln -sfn "lbweb-$version.cmdline" "$out/lbweb.cmdline"
echo "$version" >"$out/VERSION"
log "done: $raw ($(du -h --apparent-size "$raw" | cut -f1) raw, $(du -h "$raw" | cut -f1) used)," \
  "$out/lbweb-$version.qcow2 ($(du -h "$out/lbweb-$version.qcow2" | cut -f1))"
