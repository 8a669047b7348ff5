#!/usr/bin/env bash
# Build the appliance image and test it for real under qemu (root; KVM when /dev/kvm is usable):
#
#   deploy/image/test.sh [--report FILE] [--keep] [--no-installer]
#
# 1. lbweb's package from this checkout (v2) and from an older commit (v1, LBWEB_UPGRADE_FROM);
# 2. the image with v1 (deploy/image/build.sh; the base system comes from its cache after the first run);
# 3. tests/support/image_vm.py: boots it (UEFI), answers the first boot through a seed disk, waits for the UI, logs in,
#    creates a farm through the API and sends real traffic through a second NIC (a tap in a namespace lab) to
#    two backends; upgrades the running appliance to v2 with apt and checks that the farm, the certificate, the
#    account and its token survived and the migrations ran; tests a flow-offload farm; checks every unit, each
#    program's user and capabilities, and that systemd restarts each killed program; then boots the image with
#    `lbweb.install` to write it to an empty disk, and boots that disk with BIOS.
# --no-installer leaves out the last two boots. The report (JSON: timings, image size, traffic) goes to FILE
# (default dist/image-test.json); --keep keeps the machines' consoles and logs (the report names the directory).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
cd "$src"
# v1: the first commit with the HTTPS appliance, its systemd units and one line of migrations (merged 0008s).
upgrade_from=${LBWEB_UPGRADE_FROM:-dac51eeee053af26b51d94e1ec548fd358dc525f}
report=$src/dist/image-test.json
keep=()
while (($#)); do
  case $1 in
    --report) report=${2:?}; shift 2 ;;
    --keep | --no-installer) keep+=("$1"); shift ;;
    *) echo "usage: $0 [--report FILE] [--keep] [--no-installer]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "lbweb image test: run as root" >&2; exit 1; }
mkdir -p "$(dirname "$report")"
report=$(realpath "$report")
out=$(mktemp -d /var/tmp/lbweb-image-build.XXXXXX)
trap 'rm -rf "$out"' EXIT
python=$src/.venv/bin/python
timings=$out/timings
step() { # NAME COMMAND...: run it, its output in $out/NAME.log, its time in $timings
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s)
  "$@" >"$out/$name.log" 2>&1 || rc=$?
  echo "$name $(($(date +%s) - t0))" >>"$timings"
  if ((rc)); then
    echo "lbweb image test: $name failed:" >&2
    tail -n 60 "$out/$name.log" >&2
    exit $rc
  fi
  echo "lbweb image test: $name done ($(tail -n 1 "$timings" | cut -d' ' -f2) s)"
}
step deb-v2 deploy/deb/build.sh --out "$out/v2"
step deb-v1 deploy/deb/build.sh --rev "$upgrade_from" --out "$out/v1"
step image deploy/image/build.sh --deb "$out"/v1/lbweb_*.deb --out "$out/image"
grep -q "base system from the cache" "$out/image.log" && cached=true || cached=false
tail -n 1 "$out/image.log"
rc=0
"$python" -m tests.support.image_vm --image-dir "$out/image" --upgrade-deb "$out"/v2/lbweb_*.deb --report "$report" \
  "${keep[@]}" || rc=$?
"$python" - "$report" "$timings" "$cached" <<'PY'
import json, sys
report_path, timings_path, cached = sys.argv[1:]
report = json.load(open(report_path))
report["build_seconds"] = {name: round(float(s), 1) for name, s in (l.split() for l in open(timings_path))}
report["base_from_cache"] = cached == "true"
json.dump(report, open(report_path, "w"), indent=2)
keys = ("build_seconds", "base_from_cache", "image", "boot_to_ui_seconds", "traffic_v1", "upgrade", "restart_seconds",
        "install_seconds", "installed_boot_to_ui_seconds", "kvm", "ok", "error")
print(json.dumps({k: report[k] for k in keys if k in report}, indent=2))
PY
exit $rc
