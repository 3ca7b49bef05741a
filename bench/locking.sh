#!/usr/bin/env bash
# The locking benchmark of issue 10: ROMIO ad_nfs's write pattern (lock a
# 4 KiB range, write it, unlock it, at random offsets of one shared file)
# from 1, 2, 4 and 8 client processes, against the same writes without
# locks, with a client Keel did not write (bench/probes/nfslock.c: libnfs,
# its raw NLM4 calls over TCP to Keel's port). Locked and unlocked
# alternate (and swap order every round), each run its own few seconds;
# the table shows the median over the rounds and locked/unlocked (of the
# medians, and per round). The goal: the locked rate at least half the
# unlocked one.
#
#   sudo bench/locking.sh [--rounds N] [--seconds S] [--export sync|async]
#                         [--procs "1 2 4 8"] [--out DIR] [--data DIR]
#
# --export: Keel's async export (default: the writes cost least, so the
#           locks weigh most) or its sync one.
# --data:   where the export goes; default /var/tmp/keel-locking.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out=$repo/bench/results/locking-$(date -u +%Y%m%dT%H%M%SZ)
data=/var/tmp/keel-locking
rounds=3; seconds=5; export_=async; procs="1 2 4 8"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2;;
    --seconds) seconds=$2; shift 2;;
    --export) export_=$2; shift 2;;
    --procs) procs=$2; shift 2;;
    --out) out=$2; shift 2;;
    --data) data=$2; shift 2;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2;;
  esac
done
case $export_ in sync|async) ;; *) echo "locking.sh: --export sync or async" >&2; exit 2;; esac
[ "$(id -u)" -eq 0 ] || { echo "locking.sh: run as root" >&2; exit 1; }
mkdir -p "$out"

nfslock=$(bash "$here/probes/build.sh" | tail -1 | awk '{print $4}')
. "$here/servers.sh"
keel_start "$data" "$out"
echo "$(machine_line); keel $keel_version; export $export_; rounds $rounds x ${seconds}s" | tee "$out/machine.txt"
url="nfs://127.0.0.1$run/keel-$export_?version=3&nfsport=2050&mountport=2050"

results=$out/results.tsv
: > "$results"
run_one() { # mode procs round
  local line v
  line=$(inns "$nfslock" "$url" "$2" "$seconds" "$1" 2050)
  echo "  $line"
  v=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) writes\/s.*/\1/p')
  case $v in ''|0) echo "locking.sh: $1 with $2 procs failed (see $out)" >&2; exit 1;; esac
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$v" >> "$results"
}

for round in $(seq "$rounds"); do
  echo "== round $round"
  for p in $procs; do
    if [ $((round % 2)) -eq 1 ]; then run_one nolock "$p" "$round"; run_one lock "$p" "$round"
    else run_one lock "$p" "$round"; run_one nolock "$p" "$round"; fi
  done
done

python3 - "$results" <<'PY' | tee "$out/table.md"
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
vals, procs = {}, []
for mode, p, rnd, v in rows:
    if int(p) not in procs:
        procs.append(int(p))
    vals.setdefault((mode, int(p)), []).append(float(v))
# Locked, every write is three calls (LOCK, WRITE, UNLOCK): the last
# column compares the calls the server answered per second.
print("| clients | unlocked (writes/s) | locked (writes/s) | locked/unlocked | per round | calls/s, locked/unlocked |")
print("|---|---|---|---|---|---|")
for p in procs:
    u, l = vals[("nolock", p)], vals[("lock", p)]
    per = " ".join(f"{b/a:.2f}" for a, b in zip(u, l))
    mu, ml = statistics.median(u), statistics.median(l)
    print(f"| {p} | {mu:.0f} | {ml:.0f} | {ml/mu:.2f} | {per} | {3*ml/mu:.2f} |")
PY
echo "results in $out"
