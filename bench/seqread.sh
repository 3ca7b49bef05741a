#!/usr/bin/env bash
# Sequential 1 MiB READs from the page cache, Keel against NFS-Ganesha and
# the loopback's own bound, in one run (issue 30, item 23):
#
# - IOR's file-per-process pattern over libnfs (bench/probes/nfsread.c,
#   as IOR's LIBNFS backend does it: a mount and a file per process, read
#   in 1 MiB records with the synchronous API, one call in flight each),
#   from 1, 2 and 8 processes, each file read once first;
# - fio's libnfs engine (bench/fio.sh), 1 MiB reads at one call in flight
#   from 1 and 2 jobs, and one job at 8 in flight;
# - iperf3 on the same loopback, one stream and two, 1 MiB writes: what
#   the loopback carries, the bound of any server here.
#
# Every server reads the same files (512 MiB per process, hard links in
# each export), in the page cache from the start. Servers alternate in
# every round; the table shows medians over the rounds, Keel/Ganesha, and
# the goal: 1.5 x Ganesha or 90 % of the loopback, whichever is lower
# (the loopback of two streams for two processes and more).
#
#   sudo bench/seqread.sh [--rounds N] [--seconds S] [--out DIR] [--data DIR]
#                         [--base KEEL_BINARY] [--only REGEX]
#
# --base:  another Keel build (e.g. main's) served beside this tree's on
#          port 2051, alternating with it in every round: "keel-base".
# --only:  only the tests whose names match REGEX (grep -E), e.g. 'x 1'.
# --data:  where the exports go; default: a fresh XFS on a loop device
#          (16 GiB sparse, under /var/tmp), as bench/heldout.sh.
# Results: results.tsv (every round), cpu.tsv (each server's CPU per MiB,
# how busy the machine was), table.md, machine.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out=$repo/bench/results/seqread-$(date -u +%Y%m%dT%H%M%SZ)
data= base= rounds=3 seconds=5 only=.
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2;;
    --seconds) seconds=$2; shift 2;;
    --out) out=$2; shift 2;;
    --data) data=$2; shift 2;;
    --base) base=$(realpath "$2"); shift 2;;
    --only) only=$2; shift 2;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "seqread.sh: run as root" >&2; exit 1; }
if [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "seqread.sh: $out already holds results; give another --out" >&2; exit 2
fi
mkdir -p "$out"
command -v iperf3 >/dev/null ||
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iperf3 >/dev/null; }
. "$here/fio.sh"
fio_build
probes=$(bash "$here/probes/build.sh" | tail -1)
nfsread=$(echo "$probes" | awk '{print $6}')

if [ -z "$data" ]; then
  img=/var/tmp/keel-seqread.xfs; data=/var/tmp/keel-seqread
  rm -f "$img"; truncate -s 16G "$img"; mkfs.xfs -q -f "$img"
  mkdir -p "$data"; mount -o loop "$img" "$data"
  extra_cleanup="umount -l '$data'; rm -f '$img'"
fi
. "$here/servers.sh"
servers_start "$data" "$out"
servers=(ganesha keel)
if [ -n "$base" ]; then
  keel_serve "$out" "$base" 2051 keel-base
  base_pid=$last_pid
  servers+=(keel-base)
fi
echo "$(machine_line); ganesha $ganesha_version; keel $keel_version${base:+; keel-base $("$base" --version | awk '{print $2}')}; rounds $rounds of ${seconds} s; load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/machine.txt"

url() { # server -> libnfs URL of its export
  case $1 in
    ganesha) echo "nfs://127.0.0.1$run/ganesha?version=3&nfsport=2049&mountport=20048";;
    keel) echo "nfs://127.0.0.1$run/keel-sync?version=3&nfsport=2050&mountport=2050";;
    keel-base) echo "nfs://127.0.0.1$run/keel-sync?version=3&nfsport=2051&mountport=2051";;
  esac
}
server_pid() { case $1 in ganesha) echo "$ganesha_pid";; keel) echo "$keel_pid";; keel-base) echo "$base_pid";; esac; }

# The files: 512 MiB per process, written on the XFS, on its disk before
# anything is measured, and in the page cache; every export has them.
procs_max=8
for i in $(seq 0 $((procs_max - 1))); do
  dd if=/dev/urandom of="$run/keel-sync/r.$i" bs=1M count=512 status=none
  ln "$run/keel-sync/r.$i" "$run/ganesha/r.$i"
done
sync

results=$out/results.tsv cpu=$out/cpu.tsv
: > "$results"; : > "$cpu"
wanted() { grep -Eq -- "$only" <<< "$1"; }
record() { # test server round value
  local v=$4
  case $v in ''|0|0.0*) echo "seqread.sh: $1 on $2 failed (see $out)" >&2; v=failed;; esac
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$v" >> "$results"
}
run_limit=$((seconds * 3 + 60))
# CPU while a client runs: "server ticks, machine busy ticks, all ticks".
cpu_mark() {
  echo "$(awk '{print $14 + $15}' "/proc/$(server_pid "$1")/stat")" \
    "$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)"
}
cpu_record() { # test server round mark_before MiB
  local a b; read -r -a a <<< "$4"; read -r -a b <<< "$(cpu_mark "$2")"
  awk -v t="$1" -v s="$2" -v r="$3" -v mib="$5" -v hz="$(getconf CLK_TCK)" \
    -v ticks=$((b[0] - a[0])) -v busy=$((b[1] - a[1])) -v all=$((b[2] - a[2])) \
    'BEGIN { if (mib > 0 && all > 0) printf "%s\t%s\t%s\t%.0f\t%.0f\n", t, s, r, ticks / hz * 1e6 / mib, 100 * busy / all }' >> "$cpu"
}

probe_test() { # server round procs
  local name="IOR pattern (nfsread), $3 x 1" v mark
  wanted "$name" || return 0
  mark=$(cpu_mark "$1")
  # The warm-up pass runs before the measured seconds: the CPU is counted
  # over both, the rate over the measured seconds alone.
  v=$(inns timeout -k 10 "$run_limit" "$nfsread" "$(url "$1")" r "$3" "$seconds" 2>>"$out/nfsread.stderr" |
    sed -n 's/^read .*: \([0-9.]*\) MiB\/s.*/\1/p')
  record "$name" "$1" "$2" "$v"
  cpu_record "$name" "$1" "$2" "$mark" "$(awk -v v="${v:-0}" -v s="$seconds" -v p="$3" 'BEGIN { printf "%d", v * s + p * 512 }')"
}

fio_test() { # server round jobs depth
  local name="fio, $3 jobs x $4" json=$out/fio-$1-$2-$3x$4.json v mark
  wanted "$name" || return 0
  mark=$(cpu_mark "$1")
  if inns timeout -k 10 "$run_limit" "$fio" --name=seqread --ioengine=nfs --nfs_url="$(url "$1")" --rw=read --bs=1m \
      --iodepth="$4" --numjobs="$3" --size=512m --filename_format='r.$jobnum' --time_based=1 --runtime="$seconds" \
      --group_reporting=1 --output-format=json --output="$json" > "$json.stderr" 2>&1; then
    v=$(jq '[.jobs[] | .read.bw] | add / 1024' "$json")
  else
    v=failed
  fi
  record "$name" "$1" "$2" "$v"
  [ "$v" = failed ] || cpu_record "$name" "$1" "$2" "$mark" "$(jq '[.jobs[] | .read.io_kbytes] | add / 1024' "$json")"
}

loopback_test() { # round streams
  local name="iperf3 loopback, $2 stream(s) of 1 MiB writes" v
  inns iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
  local server=$!
  for _ in $(seq 50); do inns ss -ltnH | grep -q ':5201 ' && break; sleep 0.1; done
  v=$(inns timeout -k 5 $((seconds + 30)) iperf3 -c 127.0.0.1 -p 5201 -l 1M -P "$2" -t "$seconds" -J 2>/dev/null |
    jq '.end.sum_received.bits_per_second / 8 / 1048576' || echo failed)
  wait "$server" 2>/dev/null || true
  record "$name" loopback "$1" "$v"
}

for round in $(seq "$rounds"); do
  # Alternate: every round starts with the next server.
  n=${#servers[@]} order=()
  for k in $(seq 0 $((n - 1))); do order+=("${servers[$(((round - 1 + k) % n))]}"); done
  echo "== round $round: ${order[*]}; load $(cut -d' ' -f1-3 /proc/loadavg)"
  loopback_test "$round" 1
  loopback_test "$round" 2
  for s in "${order[@]}"; do
    for procs in 1 2 8; do probe_test "$s" "$round" "$procs"; done
    fio_test "$s" "$round" 1 1
    fio_test "$s" "$round" 2 1
    fio_test "$s" "$round" 1 8
  done
done

python3 - "$results" "$cpu" "${servers[@]}" <<'PY' | tee "$out/table.md"
import statistics, sys
def load(path):
    tests, vals = [], {}
    for line in open(path):
        test, server, _round, *v = line.rstrip("\n").split("\t")
        if test not in tests:
            tests.append(test)
        vals.setdefault((test, server), []).append([None if x == "failed" else float(x) for x in v])
    return tests, vals
def med(vals, t, s, i=0):
    got = [v[i] for v in vals.get((t, s), []) if v[i] is not None]
    return statistics.median(got) if got else None
def spread(vals, t, s):
    got = sorted(v[0] for v in vals.get((t, s), []) if v[0] is not None)
    return f"{got[0]:.0f}–{got[-1]:.0f}" if len(got) > 1 else ""
tests, vals = load(sys.argv[1])
ctests, cvals = load(sys.argv[2])
servers = sys.argv[3:]
loop1 = med(vals, "iperf3 loopback, 1 stream(s) of 1 MiB writes", "loopback")
loop2 = med(vals, "iperf3 loopback, 2 stream(s) of 1 MiB writes", "loopback")
f = lambda v: "" if v is None else f"{v:.0f}"
print("MiB/s, medians (the range over the rounds below each); the goal: min(1.5 x Ganesha, 0.9 x loopback)")
print()
head = " | ".join(servers)
print(f"| test | {head} | keel / ganesha | " + ("keel / keel-base | " if "keel-base" in servers else "") + "goal | keel / goal |")
print("|---|" + "---|" * (len(servers) + 3 + ("keel-base" in servers)))
for t in tests:
    if t.startswith("iperf3"):
        print(f"| {t} (loopback) | {f(med(vals, t, 'loopback'))} ({spread(vals, t, 'loopback')}) |" + " |" * (len(servers) + 2 + ("keel-base" in servers)))
        continue
    m = {s: med(vals, t, s) for s in servers}
    cells = " | ".join(f"{f(m[s])} ({spread(vals, t, s)})" for s in servers)
    loop = loop1 if t.endswith(" 1 x 1") or t.endswith("1 jobs x 1") else loop2
    goal = min(1.5 * m["ganesha"], 0.9 * loop) if m["ganesha"] and loop else None
    r = lambda a, b: f"{a / b:.2f}" if a and b else ""
    base = f" {r(m['keel'], m.get('keel-base'))} |" if "keel-base" in servers else ""
    print(f"| {t} | {cells} | {r(m['keel'], m['ganesha'])} |{base} {f(goal)} | {r(m['keel'], goal)} |")
print()
print("Server CPU per MiB read (µs, all its threads) and how busy the machine's two CPUs were (medians):")
print()
print(f"| test | " + " | ".join(f"{s} µs/MiB" for s in servers) + " | " + " | ".join(f"busy: {s}" for s in servers) + " |")
print("|---|" + "---|" * (2 * len(servers)))
for t in ctests:
    print(f"| {t} | " + " | ".join(f(med(cvals, t, s, 0)) for s in servers) + " | "
          + " | ".join(f"{f(med(cvals, t, s, 1))} %" for s in servers) + " |")
PY
echo "results in $out"
