#!/usr/bin/env bash
# The SSD cache tier in front of a slow disk, in one run: keel bench random
# (4 KiB FILE_SYNC writes, then reads, 16 in flight) and seq (1 MiB, 8 in
# flight, UNSTABLE with the COMMIT timed and FILE_SYNC, and fio's libnfs
# engine 1 MiB x 8 in flight; five rounds with the modes taking turns,
# each round in a rotated order) against one Keel whose export's cache mode is
# switched between off, write-through and write-back (keel cache mode)
# between workloads.
#
#   sudo bench/cache.sh [--quick] [--warm-only] [--rounds N] [--out DIR]
#
# --warm-only runs the fio warm-read passes alone (a few minutes);
# --rounds sets the sequential rounds (default 5).
#
# The slow disk: an XFS on a loop device throttled at the block layer by
# tools/slow-disk (cgroup v1 blkio; Keel runs in its cgroup, so
# every bio Keel sends to that device waits): 400 random read IOPS, 200
# random write IOPS, 300 MiB/s each way, about what 6-8 NL-SAS drives in
# RAID 6 give one client (the DFC 2013 paper's array at 64 clients,
# slow-disk's default, gives 9,300 / 1,600: on this 2-CPU machine the
# server would be the bound, not the disks; docs/benchmarks.md,
# "Reference systems", cites the paper). The cache devices: two files on /var/tmp (the
# machine's own disk), not throttled. Keel also runs in a memory cgroup of
# 512 MiB, so the 2 GiB of random-read files cannot stay in its page cache:
# the DFC paper's working sets were larger than its server's RAM.
#
# keel bench makes new files for every run, so the read cache (keyed by
# file handle, a block admitted at its second miss) is cold in those runs.
# The warm read cache is measured with an independent client, fio's libnfs
# engine (built by bench/heldout.sh): one file laid out sequentially (so
# it bypasses the cache), then passes of random 4 KiB reads, 16 in flight,
# each reading every block once, with every cache on the host dropped
# before each pass: pass 1 is cold, pass 2 admits, pass 3 is warm.
# Results: JSON per run and summary.txt in the output directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
slow=$repo/tools/slow-disk/slow-disk.sh
out=$repo/bench/results/cache-$(date -u +%Y%m%dT%H%M%SZ)
rnd_size=512M; rnd_ops=1500; seq_total=2G; clients=4; warm_size=128m; fill_ops=2600; warm_only=; rounds=5
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) rnd_size=128M; rnd_ops=500; seq_total=512M; warm_size=32m; fill_ops=900; shift;;
    --warm-only) warm_only=1; shift;;
    --out) out=$2; shift 2;;
    --rounds) rounds=$2; shift 2;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "cache.sh: run as root" >&2; exit 1; }
[ -x "$slow" ] || { echo "cache.sh: $slow not found" >&2; exit 1; }
mkdir -p "$out"
[ -e "$out/summary.txt" ] && { echo "cache.sh: $out already holds a run (summary.txt); give a new --out" >&2; exit 1; }
cargo build --release --bin keel --bin keel-tools --manifest-path "$repo/Cargo.toml" >/dev/null
keel=$repo/target/release/keel
work=/var/tmp/keel-cache-bench
name=keelcache
memcg=/sys/fs/cgroup/memory/keel-cache-bench
port=3049

cleanup() {
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  "$slow" destroy "$name" 2>/dev/null || true
  [ -d "$memcg" ] && rmdir "$memcg" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cleanup
mkdir -p "$work/state"
"$slow" create "$name" 8G "$work/back" 400 200 300 300
mkdir -p "$work/back/export"
fallocate -l 2G "$work/c1"; fallocate -l 2G "$work/c2"
cat > "$work/keel.toml" <<EOF
[server]
listen = ["127.0.0.1:$port"]
portmap = "off"
state_dir = "$work/state"
log_level = "warn"

[cache]
devices = ["$work/c1", "$work/c2"]
log_mib = 1024

[[export]]
path = "$work/back/export"
id = 1
access = "rw"
squash = "no_root_squash"
cache = "write-back"
[[export.clients]]
host = "127.0.0.1"
EOF
"$keel" serve --config "$work/keel.toml" >"$out/keel.log" 2>&1 &
pid=$!
for _ in $(seq 100); do "$keel" status --state-dir "$work/state" >/dev/null 2>&1 && break; sleep 0.1; done
"$slow" add "$name" "$pid"
mkdir -p "$memcg"
echo $((512 << 20)) > "$memcg/memory.limit_in_bytes"
echo "$pid" > "$memcg/cgroup.procs"

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
bench() { # label workload args...
  local label=$1 workload=$2; shift 2
  drop
  "$keel" bench "$workload" --server 127.0.0.1:$port --export "$work/back/export" --clients "$clients" \
    --label "$label" --quiet -o "$out/$label-$workload.json" "$@" | tee -a "$out/summary.txt"
}
for mode in off write-through write-back; do
  [ -n "$warm_only" ] && break
  "$keel" cache mode --state-dir "$work/state" 1 "$mode" >/dev/null
  echo "== cache $mode" | tee -a "$out/summary.txt"
  bench "$mode" random --file-size "$rnd_size" --ops "$rnd_ops" --queue-depth 16
  "$keel" cache stat --state-dir "$work/state" | tee -a "$out/summary.txt"
done
# Sequential bandwidth moves with the page cache and the kernel's own
# writeback (which the slow disk does not throttle), so the modes take
# turns, in rounds, each starting with the next mode (a fixed order
# favoured whichever mode ran first: every run leaves the disk and the
# page cache a little worse), and the medians are compared: UNSTABLE
# writes with the COMMIT timed (what the Linux client does), FILE_SYNC
# writes (O_DIRECT and O_SYNC clients; each write reaches the throttled
# disk), and an independent client, fio's libnfs engine (one file, 1 MiB,
# 8 in flight, written then read). Switching modes flushes write-back's
# log first.
median() { sort -g | awk '{ v[NR] = $1 } END { print NR ? (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) : 0 }'; }
seq_mib() { jq -r --arg p "$2" '.points[] | select(.phase == $p) | .mean' "$1"; }
fio=/var/cache/keel-bench/fio/fio
url="nfs://127.0.0.1$work/back/export?version=3&nfsport=$port&mountport=$port"
modes=(off write-through write-back)
for round in $(seq "$rounds"); do
  [ -n "$warm_only" ] && break
  for turn in 0 1 2; do
    mode=${modes[$(((round - 1 + turn) % 3))]}
    "$keel" cache mode --state-dir "$work/state" 1 off >/dev/null 2>&1
    "$keel" cache mode --state-dir "$work/state" 1 "$mode" >/dev/null 2>&1
    for stable in unstable file; do
      drop
      "$keel" bench seq --server 127.0.0.1:$port --export "$work/back/export" --clients "$clients" --quiet \
        --label "$mode" --total "$seq_total" --in-flight 8 --stable "$stable" -o "$out/seq-$stable-$mode-$round.json" >/dev/null
      echo "seq $stable round $round, cache $mode: write $(seq_mib "$out/seq-$stable-$mode-$round.json" write | cut -d. -f1)" \
        "read $(seq_mib "$out/seq-$stable-$mode-$round.json" read | cut -d. -f1) MiB/s" | tee -a "$out/summary.txt"
    done
    [ -x "$fio" ] || continue
    # fio's nfs engine sometimes waits for ever on its last reads at depth
    # 8, against any server (bench/heldout.sh): such a run counts as none.
    line="fio seq round $round, cache $mode:"
    for rw in write read; do
      drop
      json=$out/fio-seq-$rw-$mode-$round.json
      if timeout -k 5 60 "$fio" --name="seq-$rw" --ioengine=nfs --nfs_url="$url" --rw=$rw --bs=1m --iodepth=8 \
          --size=1g --filename=seqfio --output-format=json --output="$json" >/dev/null 2>&1; then
        line="$line $rw $(jq ".jobs[0].$rw.bw / 1024 | floor" "$json")"
      else
        rm -f "$json"; line="$line $rw failed"
      fi
    done
    echo "$line MiB/s" | tee -a "$out/summary.txt"
  done
done
if [ -z "$warm_only" ]; then
  echo "== sequential medians of $rounds rounds (MiB/s; of off)" | tee -a "$out/summary.txt"
  # One line: off's median, then each cached mode's and its share of off.
  against_off() { # label median-function
    local off m mode line
    off=$($2 off); line="$1: off $(printf %.0f "$off")"
    for mode in write-through write-back; do
      m=$($2 "$mode")
      line="$line, $mode $(printf %.0f "$m") ($(awk -v a="$m" -v b="$off" 'BEGIN { printf "%.0f%%", (b > 0 ? 100 * a / b : 0) }'))"
    done
    echo "$line" | tee -a "$out/summary.txt"
  }
  for stable in unstable file; do
    for phase in write read; do
      med() { for r in $(seq "$rounds"); do seq_mib "$out/seq-$stable-$1-$r.json" "$phase"; done | median; }
      against_off "seq $stable $phase" med
    done
  done
  for rw in write read; do
    [ -x "$fio" ] || break
    # A fio run that failed left no file.
    fmed() {
      for r in $(seq "$rounds"); do
        if [ -f "$out/fio-seq-$rw-$1-$r.json" ]; then jq ".jobs[0].$rw.bw / 1024" "$out/fio-seq-$rw-$1-$r.json"; fi
      done | median
    }
    against_off "fio seq $rw" fmed
  done
  "$keel" cache stat --state-dir "$work/state" | tee -a "$out/summary.txt"
fi
# Client IOPS while the destager runs flat out (the log more than half
# full) against IOPS with an idle one: random 4 KiB FILE_SYNC writes of
# files of their own, 4 clients x 16 in flight. The log is filled by random
# 64 KiB writes whose files are kept (removing them would drop their dirty
# data instead of destaging it).
if [ -z "$warm_only" ]; then
"$keel" cache mode --state-dir "$work/state" 1 off >/dev/null
"$keel" cache mode --state-dir "$work/state" 1 write-back >/dev/null
echo "== destage: idle, then flat out" | tee -a "$out/summary.txt"
bench destage-idle random --file-size 64M --ops "$rnd_ops" --queue-depth 16
"$keel" bench random --server 127.0.0.1:$port --export "$work/back/export" --clients "$clients" --quiet --keep \
  --dir destage-fill --file-size "$rnd_size" --record 64K --ops "$fill_ops" --queue-depth 16 -o "$out/destage-fill.json" >/dev/null
"$keel" cache stat --state-dir "$work/state" | grep "cache log" | tee -a "$out/summary.txt"
"$keel" bench random --server 127.0.0.1:$port --export "$work/back/export" --clients "$clients" --quiet \
  --label destage-busy --file-size 64M --ops "$rnd_ops" --queue-depth 16 -o "$out/destage-busy-random.json" |
  tee -a "$out/summary.txt"
"$keel" cache stat --state-dir "$work/state" | grep "cache log" | tee -a "$out/summary.txt"
fi

if [ -x "$fio" ]; then
  for mode in off write-through; do
    "$keel" cache mode --state-dir "$work/state" 1 "$mode" >/dev/null
    "$fio" --name=layout --ioengine=nfs --nfs_url="$url" --rw=write --bs=1m --size="$warm_size" \
      --filename="warm.$mode" --output=/dev/null >/dev/null
    for pass in 1 2 3; do
      drop
      "$fio" --name=warm --ioengine=nfs --nfs_url="$url" --rw=randread --bs=4k --iodepth=16 --size="$warm_size" \
        --filename="warm.$mode" --output-format=json --output="$out/warm-$mode-$pass.json" >/dev/null
      echo "fio random read 4 KiB x 16, cache $mode, pass $pass: $(jq '.jobs[0].read.iops | floor' "$out/warm-$mode-$pass.json") IOPS" |
        tee -a "$out/summary.txt"
    done
  done
  "$keel" cache stat --state-dir "$work/state" | tee -a "$out/summary.txt"
else
  echo "no $fio: run bench/heldout.sh once to build fio with its libnfs engine; warm reads not measured" |
    tee -a "$out/summary.txt"
fi
echo "results in $out"
