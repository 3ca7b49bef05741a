#!/usr/bin/env bash
# A/B of two Keel binaries, alternating, on one plain directory: fio's
# libnfs engine, random 4 KiB reads at 16 in flight for 10 s from a cold
# page cache, then again warm, each with the server's context switches and
# CPU per READ; then GETATTR at 16 in flight (bench/probes). For telling a
# change from the noise of a bench/heldout.sh run.
#
#   bench/ab.sh ROUNDS KEEL_A KEEL_B [DIR]          (as root: it drops caches)
#   bench/ab.sh --meta [--async] ROUNDS KEEL_A KEEL_B [DIR]
#
# DIR (default /var/tmp/keel-ab) gets a 512 MiB file; fio comes from
# bench/heldout.sh's build. --meta instead runs bench/probes' nfsmeta
# (libnfs; create, stat, remove of 2000 files from 1, then 8 processes) on
# Keel's default export, which is `sync`; DIR defaults to an XFS image
# mounted at /var/tmp/keel-ab-xfs (the reference systems' file system,
# docs/benchmarks.md, and the one
# whose log forces a sync export's group commit shares); --async exports it
# `async`. Each line ends with the server's context switches and CPU per
# file and phase of that run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
meta=false; sync=sync
[ "${1:-}" = --meta ] && { meta=true; shift; }
$meta && [ "${1:-}" = --async ] && { sync=async; shift; }
rounds=${1:?rounds}; a=${2:?first keel binary}; b=${3:?second keel binary}; dir=${4:-}
probes=$(bash "$here/probes/build.sh" | tail -1)
# On a VM that gives freed memory back to its host, both binaries get
# memory the host backs (bench/servers.sh).
. "$here/servers.sh"
trap guest_memory_release EXIT
# The server's context switches (all its threads) and CPU ticks so far.
server_usage() {
  echo "$(cat /proc/"$1"/task/*/status | awk '/ctxt_switches/ {s += $2} END {print s}')" \
    "$(awk '{print $14 + $15}' /proc/"$1"/stat)"
}
guest_memory_hold
if $meta; then
  nfsmeta=$(echo "$probes" | awk '{print $2}')
  if [ -z "$dir" ]; then
    dir=/var/tmp/keel-ab-xfs
    if ! mountpoint -q "$dir"; then
      mkdir -p "$dir"; truncate -s 4G "$dir.img"; mkfs.xfs -q -f "$dir.img"; mount -o loop "$dir.img" "$dir"
    fi
  fi
  url="nfs://127.0.0.1$dir/exp?nfsport=2049&mountport=2049&version=3"
  for r in $(seq "$rounds"); do
    for bin in "$a" "$b"; do
      rm -rf "$dir/state" "$dir/exp"; mkdir -p "$dir/exp"
      cat >"$dir/keel.toml" <<EOF
[server]
listen = ["127.0.0.1:2049"]
portmap = "off"
state_dir = "$dir/state"
log_level = "warn"
[[export]]
path = "$dir/exp"
id = 1
sync = $([ $sync = sync ] && echo true || echo false)
[[export.clients]]
host = "127.0.0.1"
access = "rw"
squash = "no_root_squash"
EOF
      "$bin" serve -c "$dir/keel.toml" >"$dir/serve.log" 2>&1 &
      pid=$!; sleep 1
      for procs in 1 8; do
        # The last run's metadata on disk first (heldout.sh's settle).
        sync
        read -r s0 t0 < <(server_usage "$pid")
        rates=$(timeout -k 5 120 "$nfsmeta" "$url" "$procs" $((2000 / procs)) | awk '{printf "%s %s  ", $1, $2}')
        read -r s1 t1 < <(server_usage "$pid")
        # 2000 files, three phases; CPU ticks are 1/100 s (CLK_TCK).
        cost=$(awk -v s=$((s1 - s0)) -v t=$((t1 - t0)) 'BEGIN {printf "(%.2f switches, %.0f us CPU per file and phase)", s / 6000, t * 10000 / 6000}')
        echo "round $r $bin $sync: $procs proc: $rates$cost"
      done
      kill "$pid"; wait "$pid" 2>/dev/null || true
    done
  done
  exit 0
fi
dir=${dir:-/var/tmp/keel-ab}
fio=/var/cache/keel-bench/fio/fio
[ -x "$fio" ] || { echo "ab.sh: no $fio: run bench/heldout.sh once" >&2; exit 1; }
nfsping=$(echo "$probes" | awk '{print $1}')
mkdir -p "$dir/exp"
[ -f "$dir/exp/r" ] || dd if=/dev/urandom of="$dir/exp/r" bs=1M count=512 status=none
url="nfs://127.0.0.1$dir/exp?nfsport=2049&mountport=2049&version=3"
for r in $(seq "$rounds"); do
  for bin in "$a" "$b"; do
    rm -rf "$dir/state"
    "$bin" serve --listen 127.0.0.1:2049 --portmap off --state-dir "$dir/state" --log-level warn "$dir/exp" >"$dir/serve.log" 2>&1 &
    pid=$!; sleep 1
    rr=""
    for cache in cold warm; do
      [ $cache = cold ] && { sync; echo 3 > /proc/sys/vm/drop_caches; }
      read -r s0 t0 < <(server_usage "$pid")
      json=$(timeout -k 5 40 "$fio" --name=rr --ioengine=nfs --nfs_url="$url" --rw=randread --bs=4k --iodepth=16 --size=512m \
        --filename=r --time_based=1 --runtime=10 --output-format=json 2>/dev/null | sed -n '/^{/,$p')
      read -r s1 t1 < <(server_usage "$pid")
      n=$(echo "$json" | jq '.jobs[0].read.total_ios' 2>/dev/null || echo 0)
      if [ "${n:-0}" -gt 0 ]; then
        rr+="$cache $(echo "$json" | jq '.jobs[0].read.iops | floor') IOPS"
        # CPU ticks are 1/100 s (CLK_TCK).
        rr+=$(awk -v s=$((s1 - s0)) -v t=$((t1 - t0)) -v n="$n" \
          'BEGIN {printf " (%.2f switches, %.0f us CPU per READ), ", s / n, t * 10000 / n}')
      else
        rr+="$cache failed, "
      fi
    done
    g16=$("$nfsping" "$url" r getattr 16 4 | sed -n 's/.*: \([0-9.]*\) calls\/s.*/\1/p' | head -1)
    echo "round $r $bin: random read 4 KiB x 16: ${rr}GETATTR x 16 $g16 calls/s"
    kill "$pid"; wait "$pid" 2>/dev/null || true
  done
done
