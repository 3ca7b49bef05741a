#!/usr/bin/env bash
# Where a 1 MiB sequential WRITE's time goes in the server: fio's libnfs
# engine writes for 8 s to a Keel `async` export on a fresh XFS (a loop
# device), while `perf record` samples the server for 4 s. Prints fio's
# bandwidth, the server's CPU seconds per GiB received, and the symbols
# with the most samples.
#
#   sudo bench/profile-write.sh [x8|2x1]
#
# x8: one job, 8 calls in flight on one file (default); 2x1: two jobs,
# one call in flight each, a file each. Keel is the release build of this
# tree. Needs bench/heldout.sh's fio (run that once) and perf.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
mode=${1:-x8}
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

# A fresh XFS, and Keel in a network namespace as the held-out run has it
# (bench/servers.sh: the async export is $run/keel-async on port 2050).
. "$here/servers.sh"
img=$(mktemp /var/tmp/keel-profile.XXXXXX.xfs); data=${img%.xfs}
extra_cleanup="umount -l '$data' 2>/dev/null; rm -rf '$data' '$img'"
trap servers_cleanup EXIT
truncate -s 8G "$img"; mkfs.xfs -q -f "$img"; mkdir -p "$data"; mount -o loop "$img" "$data"
keel_start "$data" "$data/out"
server=${server_pids// /}

(sleep 1.5; perf record -q -e cpu-clock -g -o "$data/out/perf.data" -p "$server" -- sleep 4 >/dev/null 2>&1) &
sampler=$!
# shellcheck disable=SC2086 # $jobs is a list of options
inns "$fio" --name=w --ioengine=nfs --rw=write --bs=1m --size=2g $jobs --time_based=1 --runtime=8 \
  --nfs_url="nfs://127.0.0.1$run/keel-async?version=3&nfsport=2050&mountport=2050" \
  --filename_format='w$jobnum' --group_reporting=1 | grep -o 'WRITE: bw=[0-9.]*[MG]iB/s'
wait "$sampler"
awk -v gib="$(awk '/^rchar/ {print $2 / 2^30}' "/proc/$server/io")" \
  '{printf "server CPU: %.2f s for %.1f GiB received, %.2f s per GiB\n", ($14 + $15) / 100, gib, ($14 + $15) / 100 / gib}' \
  "/proc/$server/stat"
perf report -i "$data/out/perf.data" --no-children --sort sym --stdio 2>/dev/null |
  grep -E '^ +[0-9.]+%' | head -12
