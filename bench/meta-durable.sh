#!/usr/bin/env bash
# Durable metadata: one or more Keel builds' `sync` export against XFS
# alone doing the same durable work (nfsmeta's `durable` mode: fsync of the
# new file and of its directory after a create, of the directory after a
# remove) and against NFS-Ganesha (which does not commit creates and
# removes before replying), from 1, 2 and 8 processes (bench/probes'
# nfsmeta on libnfs: LOOKUP of the directory, CREATE, LOOKUP of the new
# file per create; LOOKUP, REMOVE per remove), each process in a directory
# of its own (mdtest -u) and all in one (`shared`, mdtest's default).
# Everything alternates in every round (even rounds in reverse order); the
# table shows medians.
# Every run also counts, per file, the XFS log forces asked for, the log
# writes done and the device's cache flushes (nfsmeta, NFSMETA_XFS_DEV):
# what made the files durable, and how many files shared one log write.
# devices.tsv adds, per run (create, stat and remove together), what the
# loop device and the disk under its image file report (/proc/diskstats):
# how long a log write and a flush took below XFS, and their size.
#
#   sudo bench/meta-durable.sh [--rounds N] [--procs "1 2 8"] [--layouts "own shared"]
#                              [--files N] [--out DIR] [--lock FILE] [--async] KEEL...
#
# --lock: hold FILE (flock) for the setup and for each round, not between
# them: on a machine shared with other measurements, each round runs alone.
# --async: also the last KEEL's `async` export (label KEEL-async): the same
# calls with no sync, for what the client's round trips cost alone.
# KEEL: release binaries of Keel (e.g. copies of target/release/keel of
# two commits, named for them: the table uses the file names). The XFS is
# a fresh 4 GiB image on a loop device under /var/tmp; servers run in a
# network namespace (bench/servers.sh). Results: DIR/results.tsv (every
# run) and DIR/table.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
rounds=3 procs_list="1 2 8" layouts="own shared" files=2000 lock= async=false
out=$repo/bench/results/meta-durable-$(date -u +%Y%m%dT%H%M%SZ)
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2;;
    --procs) procs_list=$2; shift 2;;
    --layouts) layouts=$2; shift 2;;
    --lock) lock=$2; shift 2;;
    --async) async=true; shift;;
    --files) files=$2; shift 2;;
    --out) out=$2; shift 2;;
    -*) echo "unknown option $1 (see the header of $0)" >&2; exit 2;;
    *) break;;
  esac
done
[ $# -ge 1 ] || { echo "usage: $0 [--rounds N] [--procs LIST] [--layouts LIST] [--files N] [--out DIR] [--lock FILE] KEEL..." >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "meta-durable.sh: run as root" >&2; exit 1; }
keels=()
for k in "$@"; do
  [ -x "$k" ] || { echo "meta-durable.sh: $k is not an executable" >&2; exit 2; }
  keels+=("$(cd "$(dirname "$k")" && pwd)/$(basename "$k")")
done
if [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "meta-durable.sh: $out already holds results; give another --out" >&2; exit 2
fi
mkdir -p "$out"
if [ -n "$lock" ]; then exec {lock_fd}>"$lock"; flock "$lock_fd"; fi
nfsmeta=$(bash "$here/probes/build.sh" | tail -1 | awk '{print $2}')

img=/var/tmp/keel-meta-durable.xfs; data=/var/tmp/keel-meta-durable
mountpoint -q "$data" && umount "$data"
rm -f "$img"; truncate -s 4G "$img"; mkfs.xfs -q -f "$img"
mkdir -p "$data"; mount -o loop "$img" "$data"
dev=$(basename "$(findmnt -no SOURCE "$data")")
backing=$(basename "$(findmnt -no SOURCE -T "$(dirname "$img")")")
extra_cleanup="umount -l '$data'; rm -f '$img'"
. "$here/servers.sh"
servers_start "$data" "$out"
# The harness's own build goes: each KEEL given is started in turn.
kill "$keel_pid"; wait "$keel_pid" 2>/dev/null || true
mkdir -p "$run/local"
echo "$(machine_line) ($dev); ganesha $ganesha_version; rounds $rounds; $files files per run" | tee "$out/machine.txt"

results=$out/results.tsv
printf 'target\tlayout\tround\tprocs\tphase\tfiles_s\tlog_forces\tlog_writes\tflushes\tserver_us\tmachine_us\tload\n' > "$results"
devices=$out/devices.tsv
printf 'target\tlayout\tround\tprocs\tdevice\twrites\tus_per_write\tkib_per_write\tflushes\tus_per_flush\n' > "$devices"
# A device's writes, ms writing, flushes, ms flushing and sectors written.
disk_counters() { awk -v d="$1" '$3 == d {print $8, $11, $19, $20, $10}' /proc/diskstats; }
# Every nfsmeta run of a target: a line per phase into results.tsv.
meta_runs() { # label round target [pid] [durable]
  local label=$1 round=$2 target=$3 pid=${4:-} durable=${5:-} layout procs
  for layout in $layouts; do
    for procs in $procs_list; do
      meta_run "$label" "$layout" "$round" "$procs" "$target" "$pid" $durable $([ "$layout" = shared ] && echo shared)
    done
  done
}
meta_run() { # label layout round procs target pid [durable] [shared]
  local label=$1 layout=$2 round=$3 procs=$4 target=$5 pid=$6 load
  shift 6
  # Settle: what earlier runs left (an async run's metadata not yet
  # written in place) is written now, not during this run: a freeze
  # writes back everything and empties the log.
  sync; xfs_freeze -f "$data"; xfs_freeze -u "$data"
  load=$(cut -d' ' -f1 /proc/loadavg)
  local before_loop before_backing
  before_loop=$(disk_counters "$dev"); before_backing=$(disk_counters "$backing")
  # "create 2490 files/s  CPU per file: clients 53 us, server 0 us, rest 162
  # us, machine 215 us; busy 30 %; per file: log forces 1.00, log writes
  # 1.00, flushes 2.00"
  inns env ${pid:+NFSMETA_SERVER_PID=$pid} NFSMETA_XFS_DEV="$dev" timeout -k 10 120 \
    "$nfsmeta" "$target" "$procs" $((files / procs)) "$@" |
    awk -v l="$label" -v y="$layout" -v r="$round" -v p="$procs" -v ld="$load" '{
      gsub(/,/, ""); printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l, y, r, p, $1, $2, $(NF-5), $(NF-2), $NF, $11, $17, ld }' |
    tee -a "$results"
  local d before
  for d in "$dev" "$backing"; do
    if [ "$d" = "$dev" ]; then before=$before_loop; else before=$before_backing; fi
    echo "$before $(disk_counters "$d")" | awk -v l="$label" -v y="$layout" -v r="$round" -v p="$procs" -v d="$d" '{
      w = $6 - $1; f = $8 - $3
      printf "%s\t%s\t%s\t%s\t%s\t%d\t%.1f\t%.1f\t%d\t%.1f\n", l, y, r, p, d, w, w ? ($7 - $2) * 1000 / w : 0,
        w ? ($10 - $5) / 2 / w : 0, f, f ? ($9 - $4) * 1000 / f : 0 }' >> "$devices"
  done
}
[ -n "$lock" ] && flock -u "$lock_fd"
for round in $(seq "$rounds"); do
  [ -n "$lock" ] && flock "$lock_fd"
  order=(local-durable "${keels[@]}" ganesha)
  if [ $((round % 2)) -eq 0 ]; then
    rev=(); for ((i = ${#order[@]} - 1; i >= 0; i--)); do rev+=("${order[i]}"); done; order=("${rev[@]}")
  fi
  echo "== round $round ($(uptime))"
  for t in "${order[@]}"; do
    case $t in
      local-durable) meta_runs "$t" "$round" "$run/local" "" durable;;
      ganesha) meta_runs "$t" "$round" "nfs://127.0.0.1$run/ganesha?version=3&nfsport=2049&mountport=20048" "$ganesha_pid";;
      *)
        rm -rf "$run/keel-state"; mkdir -p "$run/keel-state"
        keel=$t keel_serve "$out"
        meta_runs "keel-$(basename "$t")" "$round" "nfs://127.0.0.1$run/keel-sync?version=3&nfsport=2050&mountport=2050" "$keel_pid"
        if $async && [ "$t" = "${keels[-1]}" ]; then
          meta_runs "keel-$(basename "$t")-async" "$round" \
            "nfs://127.0.0.1$run/keel-async?version=3&nfsport=2050&mountport=2050" "$keel_pid"
        fi
        kill "$keel_pid"; wait "$keel_pid" 2>/dev/null || true;;
    esac
  done
  [ -n "$lock" ] && flock -u "$lock_fd"
done

python3 - "$results" <<'PY' | tee "$out/table.md"
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
runs = {}
for target, layout, _round, procs, phase, rate, forces, writes, flushes, server, machine, _load in rows:
    if phase == "stat":
        continue
    runs.setdefault((layout, phase, int(procs), target), []).append(
        tuple(float(x) for x in (rate, forces, writes, flushes, server, machine)))
targets = list(dict.fromkeys(k[3] for k in runs))
keels = [t for t in targets if t.startswith("keel") and not t.endswith("-async")]
print("Medians over the rounds: files/s (per file: XFS log forces asked / log writes / device flushes; server CPU µs).")
print()
print("| layout | phase | procs | " + " | ".join(targets) + " | " + " | ".join(f"{t} / XFS alone" for t in keels) + " |")
print("|---|---|---|" + "---|" * (len(targets) + len(keels)))
for layout in dict.fromkeys(k[0] for k in runs):
    for phase in ("create", "remove"):
        for procs in sorted({k[2] for k in runs if k[0] == layout and k[1] == phase}):
            med = {t: [statistics.median(c) for c in zip(*runs[k])] for t in targets
                   if (k := (layout, phase, procs, t)) in runs}
            cells = []
            for t in targets:
                m = med.get(t)
                cells.append("-" if m is None else f"{m[0]:.0f} ({m[1]:.2f} / {m[2]:.2f} / {m[3]:.2f}; {m[4]:.0f} µs)")
            base = med.get("local-durable", [0])[0]
            ratios = [f"{med[t][0] / base:.2f}" if base and t in med else "-" for t in keels]
            print(f"| {layout} | {phase} | {procs} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
PY
python3 - "$devices" "$dev" <<'PY' | tee -a "$out/table.md"
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
loop = sys.argv[2]
runs = {}
for target, _layout, _round, procs, device, writes, us_write, kib_write, flushes, us_flush in rows:
    if int(writes) == 0 and int(flushes) == 0:
        continue
    role = "loop" if device == loop else "disk"
    runs.setdefault((target, int(procs), role), []).append(
        (float(us_write), float(kib_write), float(us_flush), int(writes) / int(flushes) if int(flushes) else None))
print()
print("Below XFS, medians over layouts and rounds (each run's create, stat and remove): the loop device's "
      "µs per write and per flush and KiB per write; the disk under the image file: µs per flush, writes per flush.")
print()
print("| target | procs | loop µs/write | loop KiB/write | loop µs/flush | disk µs/flush | disk writes/flush |")
print("|---|---|---|---|---|---|---|")
# Targets whose runs wrote nothing to the loop device (Ganesha) are left out.
for target, procs in dict.fromkeys((k[0], k[1]) for k in sorted(runs, key=lambda k: (k[1], k[0])) if k[2] == "loop"):
    med = lambda runs: [statistics.median(v) if (v := [x for x in c if x is not None]) else None for c in zip(*runs)]
    lo, di = med(runs[(target, procs, "loop")]), med(runs.get((target, procs, "disk"), [(None,) * 4]))
    cell = lambda x, fmt: "-" if x is None else format(x, fmt)
    print(f"| {target} | {procs} | {lo[0]:.0f} | {lo[1]:.1f} | {lo[2]:.0f} | {cell(di[2], '.0f')} | {cell(di[3], '.2f')} |")
PY
echo "results in $out"
