#!/usr/bin/env bash
# Where a 1 MiB sequential WRITE's time goes in the server: fio's libnfs
# engine writes for 8 s to a Keel `async` export on a fresh XFS (a loop
# device), while `perf record` samples the server for 4 s. Prints fio's
# bandwidth, the server's CPU seconds per GiB received, and the symbols
# with the most samples.
#
#   sudo bench/profile-write.sh [x8|2x1] [KEEL_BINARY]
#
# x8: one job, 8 calls in flight on one file (default); 2x1: two jobs,
# one call in flight each, a file each. KEEL_BINARY defaults to the
# release build. Needs bench/heldout.sh's fio (run that once) and perf.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
mode=${1:-x8}
keel=${2:-$repo/target/release/keel}
fio=/var/cache/keel-bench/fio/fio
[ "$(id -u)" -eq 0 ] || { echo "profile-write.sh: run as root" >&2; exit 1; }
[ -x "$fio" ] || { echo "profile-write.sh: no $fio (bench/heldout.sh builds it)" >&2; exit 1; }
command -v perf >/dev/null ||
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends linux-perf >/dev/null; }
case $mode in
  x8) jobs="--iodepth=8 --numjobs=1";;
  2x1) jobs="--iodepth=1 --numjobs=2";;
  *) echo "profile-write.sh: mode is x8 or 2x1" >&2; exit 2;;
esac
[ -x "$keel" ] || (cd "$repo" && cargo build --release -q -p keel)

work=$(mktemp -d /var/tmp/keel-profile.XXXXXX)
img=$work.xfs
cleanup() {
  [ -n "${server:-}" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  umount -l "$work/data" 2>/dev/null || true
  rm -rf "$work" "$img"
}
trap cleanup EXIT
truncate -s 8G "$img"; mkfs.xfs -q -f "$img"
mkdir -p "$work/data" "$work/state"; mount -o loop "$img" "$work/data"; mkdir "$work/data/async"
cat > "$work/keel.toml" <<CONF
[server]
listen = ["127.0.0.1:2052"]
portmap = "off"
state_dir = "$work/state"
[[export]]
path = "$work/data/async"
id = 2
access = "rw"
sync = false
squash = "no_root_squash"
clients = [{ host = "127.0.0.1" }]
CONF
"$keel" serve --config "$work/keel.toml" > "$work/keel.log" 2>&1 &
server=$!
for _ in $(seq 50); do (echo > /dev/tcp/127.0.0.1/2052) 2>/dev/null && break; sleep 0.1; done

(sleep 1.5; perf record -q -e cpu-clock -g -o "$work/perf.data" -p "$server" -- sleep 4 >/dev/null 2>&1) &
sampler=$!
# shellcheck disable=SC2086 # $jobs is a list of options
"$fio" --name=w --ioengine=nfs --rw=write --bs=1m --size=2g $jobs --time_based=1 --runtime=8 \
  --nfs_url="nfs://127.0.0.1$work/data/async?version=3&nfsport=2052&mountport=2052" \
  --filename_format='w$jobnum' --group_reporting=1 | grep -o 'WRITE: bw=[0-9.]*[MG]iB/s'
wait "$sampler"
awk -v gib="$(awk '/^rchar/ {print $2 / 2^30}' "/proc/$server/io")" \
  '{printf "server CPU: %.2f s for %.1f GiB received, %.2f s per GiB\n", ($14 + $15) / 100, gib, ($14 + $15) / 100 / gib}' \
  "/proc/$server/stat"
perf report -i "$work/perf.data" --no-children --sort sym --stdio 2>/dev/null |
  grep -E '^ +[0-9.]+%' | head -12
