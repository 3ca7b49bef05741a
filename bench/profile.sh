#!/usr/bin/env bash
# Where the server's time goes under one of bench/heldout.sh's fio
# workloads: fio's libnfs engine runs for 8 s against a Keel `async`
# export on a fresh XFS (a loop device), while `perf record` samples the
# server for 4 s. Prints fio's rate, the CPU time of the server and of fio
# per call, and the symbols with the most samples.
#
#   sudo bench/profile.sh [write-x8|write-2x1|randwrite-x16|randread-x16]
#
# write-x8: 1 MiB writes, one job, 8 calls in flight on one file
# (default); write-2x1: two jobs, one call in flight each, a file each;
# rand*-x16: 4 KiB at 16 in flight on one 512 MiB file (laid out first,
# page cache kept: the rate of the serving path, not of the disk). Keel is
# the release build of this tree. Needs bench/heldout.sh's fio (run that
# once) and perf. Holds the guest's memory as heldout.sh does.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
mode=${1:-write-x8}
fio=/var/cache/keel-bench/fio/fio
[ "$(id -u)" -eq 0 ] || { echo "profile.sh: run as root" >&2; exit 1; }
[ -x "$fio" ] || { echo "profile.sh: no $fio (bench/heldout.sh builds it)" >&2; exit 1; }
command -v perf >/dev/null ||
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends linux-perf >/dev/null; }
case $mode in
  write-x8) job="--rw=write --bs=1m --size=2g --iodepth=8 --numjobs=1";;
  write-2x1) job="--rw=write --bs=1m --size=2g --iodepth=1 --numjobs=2";;
  randwrite-x16) job="--rw=randwrite --bs=4k --size=512m --iodepth=16 --numjobs=1";;
  randread-x16) job="--rw=randread --bs=4k --size=512m --iodepth=16 --numjobs=1";;
  *) echo "profile.sh: the workload is write-x8, write-2x1, randwrite-x16 or randread-x16" >&2; exit 2;;
esac

# A fresh XFS, and Keel in a network namespace as heldout.sh has it
# (bench/servers.sh: the async export is $run/keel-async on port 2050).
. "$here/servers.sh"
img=$(mktemp /var/tmp/keel-profile.XXXXXX.xfs); data=${img%.xfs}
extra_cleanup="umount -l '$data' 2>/dev/null; rm -rf '$data' '$img'"
trap servers_cleanup EXIT
truncate -s 8G "$img"; mkfs.xfs -q -f "$img"; mkdir -p "$data"; mount -o loop "$img" "$data"
keel_start "$data" "$data/out"
server=${server_pids// /}
url="nfs://127.0.0.1$run/keel-async?version=3&nfsport=2050&mountport=2050"
# fio's nfs engine creates files only for sequential writes.
case $mode in rand*)
  inns "$fio" --name=layout --ioengine=nfs --nfs_url="$url" --rw=write --bs=1m --size=512m \
    --filename_format='w$jobnum' --output=/dev/null >/dev/null;;
esac

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
before=$(cpu_ticks "$server")
(sleep 1.5; perf record -q -e cpu-clock -g -o "$data/out/perf.data" -p "$server" -- sleep 4 >/dev/null 2>&1) &
sampler=$!
# shellcheck disable=SC2086 # $job is a list of options
inns "$fio" --name=w --ioengine=nfs $job --time_based=1 --runtime=8 --nfs_url="$url" \
  --filename_format='w$jobnum' --group_reporting=1 --output-format=json --output="$data/out/fio.json" \
  2>/dev/null || true
wait "$sampler"
after=$(cpu_ticks "$server")
jq -r --argjson ticks $((after - before)) '
  .jobs[0] as $j | ($j.read.total_ios + $j.write.total_ios) as $calls
  | "fio: \(($j.read.iops + $j.write.iops) | floor) calls/s, \((($j.read.bw + $j.write.bw) / 1024) | floor) MiB/s",
    "CPU per call: server \(($ticks * 1e4 / $calls * 100 | floor) / 100) us, fio \((($j.usr_cpu + $j.sys_cpu) / 100 * $j.job_runtime * 1e3 / $calls * 100 | floor) / 100) us (fio at \(($j.usr_cpu + $j.sys_cpu) | floor) % of a CPU)"' \
  "$data/out/fio.json"
# PROFILE_KEEP=FILE keeps the samples for perf report.
[ -z "${PROFILE_KEEP:-}" ] || cp "$data/out/perf.data" "$PROFILE_KEEP"
perf report -i "$data/out/perf.data" --no-children --sort sym --stdio 2>/dev/null |
  grep -E '^ +[0-9.]+%' | head -14
