#!/usr/bin/env bash
# Keel against NFS-Ganesha with clients Keel did not write ("held out"
# from its development, so it is not tuned to their habits), in one run:
# fio's libnfs engine (sequential 1 MiB and random 4 KiB, at one call in
# flight and at many), libnfs probes for NULL/GETATTR at a fixed depth and
# for mdtest's create/stat/remove (bench/probes), a raw client with no
# library for NULL/GETATTR at one call in flight, and a raw TCP ping-pong
# of a GETATTR's size on the same loopback, the bound for one call at a
# time. Servers and order alternate in every round; the table shows each
# figure's median over the rounds and Keel/Ganesha. The sequential tests
# also run on the same XFS without a server (fio, psync at one call in
# flight, io_uring at 8; buffered, as both servers' I/O is): the issue's
# second bound, what the file system does on its own. So do the random
# reads from a cold cache (the disk's bound; on a VM whose host caches its
# disk, a bound that moves between runs), from a warm one (the "cached"
# row: what the server itself costs per READ) and the metadata phases
# (nfsmeta on the directory: plain, and durable, syncing what a sync
# export must before it replies: the ceiling of any durable server).
# For every test through a server, cpu.tsv gets the server's own CPU time
# per operation (all its threads) and how busy the machine was (not for
# metadata, whose clients spend a second mounting first): the second table, which tells a figure the clients or the CPUs bound from
# one the server bounds. On a VM that gives freed memory back to its
# host, that is held off for the run and free memory touched first
# (bench/servers.sh: guest_memory_hold), as a physical machine's is.
#
# The metadata tests also say where the machine's CPU went per file
# (nfsmeta: the clients', the server's, the machine's in all), in a third
# table with the ratio to Ganesha that a server costing nothing would reach
# where the CPUs are the bound.
#
#   sudo bench/heldout.sh [--quick] [--rounds N] [--out DIR] [--data DIR] [--only REGEX] [--pin]
#
# --pin:  the servers on CPU 0, the clients on CPU 1 (bench/servers.sh:
#         server_cpus, client_cpus): each server's rate on one CPU of its
#         own, with the clients' CPU and their preemption of the server
#         taken out. fio on XFS alone still runs on every CPU; nfsmeta
#         on XFS alone runs where the clients do (CPU 1).
# --only: run only the tests whose names match REGEX (grep -E), e.g.
#         --only meta; the ping-pong probes always run.
# --data: where the exports go; default: a fresh XFS on a loop device
#         (the reference systems' file system, docs/benchmarks.md),
#         16 GiB sparse, under /var/tmp.
# fio is built from Debian's source package with its libnfs engine, once
# (bench/fio.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out=$repo/bench/results/heldout-$(date -u +%Y%m%dT%H%M%SZ)
data=
rounds=3 only=. server_cpus= client_cpus=
seq_size=1g; rnd_seconds=10; ping_seconds=5; meta_files=2000
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) seq_size=256m; rnd_seconds=3; ping_seconds=2; meta_files=300; rounds=1; shift;;
    --rounds) rounds=$2; shift 2;;
    --out) out=$2; shift 2;;
    --data) data=$2; shift 2;;
    --only) only=$2; shift 2;;
    --pin) server_cpus=0 client_cpus=1; shift;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "heldout.sh: run as root" >&2; exit 1; }
# An earlier run's results (committed, cited in docs/) are never mixed
# with or replaced by a new run's.
if [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "heldout.sh: $out already holds results; give another --out" >&2; exit 2
fi
mkdir -p "$out"

# fio with its libnfs engine (bench/fio.sh builds it once).
. "$here/fio.sh"
fio_build
probes=$(bash "$here/probes/build.sh" | tail -1)
nfsping=$(echo "$probes" | awk '{print $1}'); nfsmeta=$(echo "$probes" | awk '{print $2}')
pingpong=$(echo "$probes" | awk '{print $3}'); nfsrm=$(echo "$probes" | awk '{print $5}')

if [ -z "$data" ]; then
  img=/var/tmp/keel-heldout.xfs; data=/var/tmp/keel-heldout
  rm -f "$img"; truncate -s 16G "$img"; mkfs.xfs -q -f "$img"
  mkdir -p "$data"; mount -o loop "$img" "$data"
  extra_cleanup="umount -l '$data'; rm -f '$img'"
fi
. "$here/servers.sh"
servers_start "$data" "$out"
echo "$(machine_line); ganesha $ganesha_version; keel $keel_version; rounds $rounds${server_cpus:+; servers on CPU $server_cpus, clients on CPU $client_cpus}" | tee "$out/machine.txt"

url() { # server -> libnfs URL of its export
  case $1 in
    ganesha) echo "nfs://127.0.0.1$run/ganesha?version=3&nfsport=2049&mountport=20048";;
    keel-sync) echo "nfs://127.0.0.1$run/keel-sync?version=3&nfsport=2050&mountport=2050";;
    keel-async) echo "nfs://127.0.0.1$run/keel-async?version=3&nfsport=2050&mountport=2050";;
  esac
}
dir() { case $1 in ganesha) echo "$run/ganesha";; *) echo "$run/$1";; esac; }
files=0
results=$out/results.tsv cpu=$out/cpu.tsv meta_cpu=$out/meta-cpu.tsv
: > "$results"; : > "$cpu"; : > "$meta_cpu"
wanted() { grep -Eq -- "$only" <<< "$1"; }
# A run that failed is recorded as "failed" and the table says so: a
# client that loses I/Os against one server must not stop the others.
record() { # test server round value
  local v=$4
  case $v in ''|0|0.0*) echo "heldout.sh: $1 on $2 failed (see $out)" >&2; v=failed;; esac
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$v" >> "$results"
}
# Every client run has a time limit (then SIGKILL: fio waits for its calls
# in flight even on SIGTERM): fio's nfs engine can wait for ever on
# a call the server dropped.
run_limit=90
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# Every test starts with the dirty data of the one before on disk: a
# sequential write leaves a GiB in the page cache, whose write-back (a
# loop device's, on this VM the host's) otherwise lands on whatever test
# runs 30 s later, on either server.
settle() { sync; }

# CPU while a client runs: "server ticks, machine busy ticks, all ticks".
server_pid() { case $1 in ganesha) echo "$ganesha_pid";; keel-*) echo "$keel_pid";; esac; }
cpu_mark() { # server
  local pid; pid=$(server_pid "$1")
  echo "$( [ -n "$pid" ] && awk '{print $14 + $15}' "/proc/$pid/stat" || echo 0)" \
    "$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)"
}
# The machine's busy share is left out (quiet) where the client idles
# part of the time measured.
# The client's own CPU (fio's, in % of one CPU) is recorded where known.
cpu_record() { # test server round mark_before operations [quiet] [client_cpu_percent]
  local a b; read -r -a a <<< "$4"; read -r -a b <<< "$(cpu_mark "$2")"
  awk -v t="$1" -v s="$2" -v r="$3" -v ops="$5" -v hz="$(getconf CLK_TCK)" -v quiet="${6:-}" \
    -v client="${7:-failed}" -v ticks=$((b[0] - a[0])) -v busy=$((b[1] - a[1])) -v all=$((b[2] - a[2])) \
    'BEGIN { if (ops > 0 && all > 0) printf "%s\t%s\t%s\t%.1f\t%s\t%s\n", t, s, r, ticks / hz * 1e6 / ops,
             quiet ? "failed" : sprintf("%.0f", 100 * busy / all), client }' >> "$cpu"
}

# fio: one job file per test; the figure is the sum of the jobs' bandwidth
# (MiB/s) or IOPS.
fio_test() { # name server round rw bs depth jobs metric [cached]
  local name=$1 server=$2 round=$3 rw=$4 bs=$5 depth=$6 jobs=$7 metric=$8 cached=${9:-}
  wanted "$name" || return 0
  settle
  local size=$seq_size timed=""
  # Files of their own for every test: removing them on the host behind
  # Ganesha's back leaves its cache with stale entries for the old names.
  files=$((files + 1))
  local names="t$files.\$jobnum"
  case $rw in rand*) size=512m; timed="time_based=1
runtime=$rnd_seconds";; esac
  # fio's nfs engine creates files only for sequential writes.
  case $rw in *read|randwrite) # lay the files out first, through the server
    inns timeout -k 10 "$run_limit" "$fio" --name=layout --ioengine=nfs --nfs_url="$(url "$server")" --rw=write --bs=1m \
      --size=$size --numjobs=$jobs --filename_format="$names" --output=/dev/null >/dev/null 2>&1 || true;;
  esac
  # cached: the files stay in the page cache the layout left them in, so
  # the server's own cost per call is measured, not the disk's.
  if [ "$cached" = cached ]; then settle; else drop_caches; fi
  cat > "$out/$name.fio" <<JOB
[$name]
ioengine=nfs
nfs_url=$(url "$server")
rw=$rw
bs=$bs
iodepth=$depth
numjobs=$jobs
size=$size
filename_format=$names
group_reporting=1
$timed
JOB
  local json=$out/$name-$server-$round.json v mark
  # fio's libnfs engine reports failed calls but not as job errors. At the
  # end of a job it cancels the calls still in flight and reports each as
  # failed (code -14): up to depth x jobs such lines are that, not errors.
  mark=$(cpu_mark "$server")
  if ! inns timeout -k 10 "$run_limit" "$fio" --output-format=json --output="$json" "$out/$name.fio" \
      > "$json.stderr" 2>&1 || [ "$(grep -c 'Failed NFS operation' "$json.stderr")" -gt $((depth * jobs)) ]; then
    record "$name" "$server" "$round" failed
    remove_files "$server" "$jobs"
    return
  fi
  if [ "$metric" = mibs ]; then
    v=$(jq '[.jobs[] | (.read.bw + .write.bw)] | add / 1024' "$out/$name-$server-$round.json")
  else
    v=$(jq '[.jobs[] | (.read.iops + .write.iops)] | add' "$out/$name-$server-$round.json")
  fi
  record "$name" "$server" "$round" "$v"
  cpu_record "$name" "$server" "$round" "$mark" "$(jq '[.jobs[] | (.read.total_ios + .write.total_ios)] | add' "$json")" "" \
    "$(jq '[.jobs[] | (.usr_cpu + .sys_cpu)] | add | floor' "$json")"
  remove_files "$server" "$jobs"
}

# The same job on the XFS directly, no server between.
local_test() { # name round rw bs depth jobs metric [cached]
  local name=$1 round=$2 rw=$3 bs=$4 depth=$5 jobs=$6 metric=$7 cached=${8:-} engine=psync dir=$run/local
  wanted "$name" || return 0
  settle
  local size=$seq_size timed=()
  case $rw in rand*) size=512m; timed=(--time_based=1 --runtime="$rnd_seconds");; esac
  [ "$depth" -gt 1 ] && engine=io_uring
  rm -rf "$dir"; mkdir -p "$dir"
  case $rw in *read)
    "$fio" --name=layout --directory="$dir" --rw=write --bs=1m --size="$size" --numjobs="$jobs" \
      --filename_format='l.$jobnum' --output=/dev/null >/dev/null 2>&1 || true;;
  esac
  if [ "$cached" = cached ]; then settle; else drop_caches; fi
  local json=$out/$name-local-$round.json sum='(.read.bw + .write.bw)] | add / 1024'
  [ "$metric" = iops ] && sum='(.read.iops + .write.iops)] | add'
  if timeout -k 10 "$run_limit" "$fio" --name="$name" --directory="$dir" --ioengine=$engine --rw=$rw --bs=$bs \
      --iodepth=$depth --numjobs=$jobs --size="$size" --filename_format='l.$jobnum' --group_reporting=1 \
      "${timed[@]}" --output-format=json --output="$json" >/dev/null 2>&1; then
    record "$name" local "$round" "$(jq "[.jobs[] | $sum" "$json")"
  else
    record "$name" local "$round" failed
  fi
  rm -rf "$dir"
}

# Through the server: both servers keep descriptors of files open, so a
# removal behind their backs would not free the space.
remove_files() { # server jobs
  local names=() j
  for j in $(seq 0 $(($2 - 1))); do names+=("t$files.$j"); done
  inns timeout -k 10 "$run_limit" "$nfsrm" "$(url "$1")" "${names[@]}" 2>/dev/null || true
}

ping_test() { # name server round op depth
  local v mark
  wanted "$1" || return 0
  settle
  mark=$(cpu_mark "$2")
  v=$(inns timeout -k 10 "$run_limit" "$nfsping" "$(url "$2")" f "$4" "$5" "$ping_seconds" | sed -n 's/.*: \([0-9.]*\) calls\/s.*/\1/p')
  record "$1" "$2" "$3" "$v"
  cpu_record "$1" "$2" "$3" "$mark" "$(awk -v v="$v" -v s="$ping_seconds" 'BEGIN { printf "%d", v * s }')"
}

# Through a server, or on the XFS alone (server local, or local-durable:
# syncing what a sync export must).
meta_test() { # server round procs
  local target mark durable=() pid=
  wanted "meta, $3 proc" || return 0
  settle
  case $1 in
    local*) target=$run/local; rm -rf "$target"; mkdir -p "$target";;
    *) target=$(url "$1"); pid=$(server_pid "$1");;
  esac
  [ "$1" = local-durable ] && durable=(durable)
  mark=$(cpu_mark "$1")
  # "create 6360 files/s  CPU per file: clients 112 us, server 163 us,
  # rest 23 us, machine 297 us; busy 92 %"
  while read -r phase rate _ _ _ _ _ clients _ _ server _ _ _ _ _ machine _ _ busy _; do
    record "meta $phase, $3 proc" "$1" "$2" "$rate"
    [ "$phase" = all ] || printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "meta $phase, $3 proc" "$1" "$2" \
      "$machine" "$server" "$clients" "$busy" >> "$meta_cpu"
  done < <(inns env ${pid:+NFSMETA_SERVER_PID=$pid} timeout -k 10 "$run_limit" "$nfsmeta" "$target" "$3" \
    "$((meta_files / $3))" "${durable[@]}" || echo "all failed -")
  # Per file and phase (a LOOKUP and the phase's call); nfsmeta's clients
  # spend a second mounting first.
  if [ "${1#local}" = "$1" ]; then
    cpu_record "meta (all phases), $3 proc" "$1" "$2" "$mark" $((3 * $3 * (meta_files / $3))) quiet
  fi
}

servers=(ganesha keel-sync keel-async)
for round in $(seq "$rounds"); do
  # Alternate: even rounds run the servers in reverse order.
  order=("${servers[@]}"); [ $((round % 2)) -eq 0 ] && order=(keel-async keel-sync ganesha)
  echo "== round $round: ${order[*]}"
  record "tcp ping-pong 132/120 B" loopback "$round" "$(inns "$pingpong" "$ping_seconds" 132 120 | sed -n 's/.*: \([0-9.]*\) round trips.*/\1/p')"
  record "tcp ping-pong 44/28 B" loopback "$round" "$(inns "$pingpong" "$ping_seconds" 44 28 | sed -n 's/.*: \([0-9.]*\) round trips.*/\1/p')"
  local_test "seq write 1 MiB, 2 jobs x 1" "$round" write 1m 1 2 mibs
  local_test "seq write 1 MiB, 1 job x 8" "$round" write 1m 8 1 mibs
  local_test "seq read 1 MiB, 2 jobs x 1" "$round" read 1m 1 2 mibs
  local_test "seq read 1 MiB, 1 job x 8" "$round" read 1m 8 1 mibs
  local_test "rand read 4 KiB, 2 jobs x 1" "$round" randread 4k 1 2 iops
  local_test "rand read 4 KiB, 1 job x 16" "$round" randread 4k 16 1 iops
  local_test "rand read 4 KiB, 1 job x 16, cached" "$round" randread 4k 16 1 iops cached
  for procs in 1 8; do
    meta_test local "$round" "$procs"
    meta_test local-durable "$round" "$procs"
  done
  for s in "${order[@]}"; do
    head -c 4096 /dev/urandom > "$(dir "$s")/f"
    port=2050; [ "$s" = ganesha ] && port=2049
    wanted "raw client" && record "NULL (raw client), 1 in flight" "$s" "$round" \
      "$(inns timeout -k 10 "$run_limit" "$pingpong" "$ping_seconds" --null $port | sed -n 's/.*: \([0-9.]*\) calls\/s.*/\1/p')"
    mport=2050; [ "$s" = ganesha ] && mport=20048
    wanted "raw client" && record "GETATTR (raw client), 1 in flight" "$s" "$round" \
      "$(inns timeout -k 10 "$run_limit" "$pingpong" "$ping_seconds" --getattr $port $mport "$(dir "$s")" | sed -n 's/.*: \([0-9.]*\) calls\/s.*/\1/p')"
    ping_test "NULL, 1 in flight" "$s" "$round" null 1
    ping_test "GETATTR, 1 in flight" "$s" "$round" getattr 1
    ping_test "GETATTR, 16 in flight" "$s" "$round" getattr 16
    fio_test "seq write 1 MiB, 2 jobs x 1" "$s" "$round" write 1m 1 2 mibs
    fio_test "seq write 1 MiB, 1 job x 8" "$s" "$round" write 1m 8 1 mibs
    fio_test "seq read 1 MiB, 2 jobs x 1" "$s" "$round" read 1m 1 2 mibs
    fio_test "seq read 1 MiB, 1 job x 8" "$s" "$round" read 1m 8 1 mibs
    fio_test "rand write 4 KiB, 2 jobs x 1" "$s" "$round" randwrite 4k 1 2 iops
    fio_test "rand write 4 KiB, 1 job x 16" "$s" "$round" randwrite 4k 16 1 iops
    fio_test "rand read 4 KiB, 2 jobs x 1" "$s" "$round" randread 4k 1 2 iops
    fio_test "rand read 4 KiB, 1 job x 16" "$s" "$round" randread 4k 16 1 iops
    fio_test "rand read 4 KiB, 1 job x 16, cached" "$s" "$round" randread 4k 16 1 iops cached
    meta_test "$s" "$round" 1
    meta_test "$s" "$round" 8
  done
done

python3 - "$results" "$cpu" "$meta_cpu" <<'PY' | tee "$out/table.md"
import statistics, sys
def load(path):
    rows = [l.rstrip("\n").split("\t") for l in open(path)]
    tests, vals = [], {}
    for test, server, _round, v, *rest in rows:
        if test not in tests:
            tests.append(test)
        vals.setdefault((test, server), []).append([None if x == "failed" else float(x) for x in [v, *rest]])
    return tests, vals
tests, vals = load(sys.argv[1])
def med(t, s, i=0, vals=vals):
    got = [v[i] for v in vals.get((t, s), []) if v[i] is not None]
    return statistics.median(got) if got else None
def failed(t, s):
    return sum(v[0] is None for v in vals.get((t, s), []))
def show(t, s):
    v, f = med(t, s), failed(t, s)
    if (t, s) not in vals:
        return ""
    text = "failed" if v is None else f"{v:.0f}"
    return text + (f" ({f} of {len(vals[(t, s)])} runs failed)" if f and v is not None else "")
ratio = lambda a, b: f"{a/b:.2f}" if a and b else ""
pp = med("tcp ping-pong 132/120 B", "loopback")
pp_null = med("tcp ping-pong 44/28 B", "loopback")
print("| test (held-out client) | Ganesha | Keel sync | Keel async | sync/Ganesha | async/Ganesha | XFS alone | async/XFS | XFS alone, durable | sync/durable XFS |")
print("|---|---|---|---|---|---|---|---|---|---|")
for t in tests:
    if t.startswith("tcp ping-pong"):
        print(f"| {t} (round trips/s) | {med(t, 'loopback'):.0f} | | | | | | | | |")
        continue
    g, s, a = med(t, "ganesha"), med(t, "keel-sync"), med(t, "keel-async")
    extra = ""
    bound = pp_null if t.startswith("NULL (raw") else pp
    if "1 in flight" in t and bound and g and s:
        extra = f" (of ping-pong: G {g/bound:.0%}, K sync {s/bound:.0%})"
    cells = " | ".join(show(t, x) for x in ("ganesha", "keel-sync", "keel-async"))
    l, d = med(t, "local"), med(t, "local-durable")
    print(f"| {t}{extra} | {cells} | {ratio(s, g)} | {ratio(a, g)} | {show(t, 'local')} | {ratio(a, l)} "
          f"| {show(t, 'local-durable')} | {ratio(s, d)} |")
ctests, cvals = load(sys.argv[2])
print()
print("Server CPU per operation (µs, all the server's threads; a sequential operation is 1 MiB), how busy the machine's CPUs were meanwhile, "
      "and fio's own CPU (% of one CPU: near 100 % per job, the client is the bound) (medians):")
print()
print("| test | Ganesha | Keel sync | Keel async | busy: Ganesha | Keel sync | Keel async | fio: Ganesha | Keel sync | Keel async |")
print("|---|---|---|---|---|---|---|---|---|---|")
servers3 = ("ganesha", "keel-sync", "keel-async")
for t in ctests:
    cols = [[med(t, x, i, cvals) for x in servers3] for i in range(3)]
    print(f"| {t} | " + " | ".join("" if v is None else f"{v:.0f}" for v in cols[0]) + " | "
          + " | ".join("" if v is None else f"{v:.0f} %" for v in cols[1]) + " | "
          + " | ".join("" if v is None else f"{v:.0f} %" for v in cols[2]) + " |")
mtests, mvals = load(sys.argv[3])
if mtests:
    print()
    print("Metadata: the machine's CPU per file (all CPUs: machine = busy share x CPUs / rate), the server's and the clients' (µs, medians). "
          "Where the machine is busy near 100 % (90 % or more in Keel async's run), a server that cost nothing would leave the clients and the rest: "
          "\"free server / G\" is the ratio to Ganesha it would reach, the ceiling of Keel async / Ganesha on these CPUs; "
          "below that the CPUs are not the bound and no ceiling is shown.")
    print()
    print("| test | Ganesha: machine / server / clients, busy | Keel sync | Keel async | free server / G |")
    print("|---|---|---|---|---|")
    for t in mtests:
        cells = []
        for x in servers3:
            m, sv, c, b = (med(t, x, i, mvals) for i in range(4))
            cells.append("" if m is None else f"{m:.0f} / {sv:.0f} / {c:.0f}, {b:.0f} %")
        gm = med(t, "ganesha", 0, mvals)
        km, ks, kb = (med(t, "keel-async", i, mvals) for i in (0, 1, 3))
        bound = gm and km and ks is not None and km > ks and kb is not None and kb >= 90
        ceiling = f"{gm / (km - ks):.2f}" if bound else ""
        print(f"| {t} | " + " | ".join(cells) + f" | {ceiling} |")
PY
echo "units: MiB/s (seq), IOPS (rand), calls/s (NULL, GETATTR), files/s (meta); results in $out"
