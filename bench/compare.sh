#!/usr/bin/env bash
# Keel against NFS-Ganesha on this machine, in one run: the servers export
# directories of the same file system, the same client (keel bench) runs the
# same workloads against each, and keel report draws them side by side with
# the Keel/Ganesha ratios.
#
# Keel runs twice: with a sync export (knfsd's default: stable writes and
# metadata changes are on disk before the reply) and an async one. NFS-
# Ganesha's FSAL VFS honours the stability of WRITEs but does not commit
# metadata changes (CREATE, REMOVE, ...) before replying, so for metadata it
# compares with Keel async, for stable data with Keel sync.
#
#   sudo bench/compare.sh [--quick] [--out DIR] [--data DIR] [--clients 1,2,4,8] [--repeat N] [--in-flight N]
#
# --in-flight: calls each client keeps in flight in the sequential test
#         (default 16, keel bench's; 1 is a client that waits for each
#         reply, as heldout.sh's fio runs at depth 1 do).
# --data: where the two export directories go (default /var/tmp/keel-compare;
#         put it on the file system you care about, e.g. an XFS).
# --quick: small sizes, for a smoke run (a minute or two).
# Everything runs in a private network namespace (bench/servers.sh), so
# nothing on the host's ports is disturbed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out=$repo/bench/results/compare-$(date -u +%Y%m%dT%H%M%SZ)
data=/var/tmp/keel-compare
clients=1,2,4,8
repeat=3
seq_in_flight=16
seq_total=4G; rnd_size=256M; rnd_ops=20000; meta_files=2000
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) seq_total=256M; rnd_size=32M; rnd_ops=2000; meta_files=200; repeat=1; clients=1,2; shift;;
    --out) out=$2; shift 2;;
    --data) data=$2; shift 2;;
    --clients) clients=$2; shift 2;;
    --repeat) repeat=$2; shift 2;;
    --in-flight) seq_in_flight=$2; shift 2;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "compare.sh: run as root" >&2; exit 1; }

. "$here/servers.sh"
servers_start "$data" "$out"
bench() { # server-label port export extra-args... -- workload args...
  local label=$1 port=$2 export=$3; shift 3
  local extra=(); while [ "$1" != "--" ]; do extra+=("$1"); shift; done; shift
  local workload=$1; shift
  inns "$keel" bench "$workload" --server 127.0.0.1:$port --export "$export" "${extra[@]}" \
    --clients "$clients" --repeat "$repeat" --label "$label" --quiet --between "$drop_caches" \
    -o "$out/${label// /-}-$workload.json" "$@"
}
# Every repetition starts with the server's page cache dropped, as the
# papers remounted between runs.
drop_caches="sync; echo 3 > /proc/sys/vm/drop_caches"
run_ganesha() {
  echo "== $1: NFS-Ganesha $ganesha_version"
  bench ganesha 2049 "$run/ganesha" --mount-port 20048 --server-name "nfs-ganesha $ganesha_version (FSAL VFS)" \
    --export-options "rw,no_root_squash (FSAL VFS) on $fs" -- "$@"
}
run_keel() {
  echo "== $1: Keel $keel_version, sync and async"
  bench "keel sync" 2050 "$run/keel-sync" --server-name "keel $keel_version" \
    --export-options "rw,sync,no_root_squash on $fs" -- "$@"
  bench "keel async" 2050 "$run/keel-async" --server-name "keel $keel_version" \
    --export-options "rw,async,no_root_squash on $fs" -- "$@"
}
# The order alternates so that neither server always meets the file system
# in the state the other left it in.
run_ganesha seq --total "$seq_total" --in-flight "$seq_in_flight"
run_keel seq --total "$seq_total" --in-flight "$seq_in_flight"
run_keel random --file-size "$rnd_size" --ops "$rnd_ops" --queue-depth 4
run_ganesha random --file-size "$rnd_size" --ops "$rnd_ops" --queue-depth 4
run_ganesha meta -n "$meta_files"; run_keel meta -n "$meta_files"
"$keel" report "$out"/*.json --output "$out/report" --baseline ganesha --title "Keel vs NFS-Ganesha, $(hostname), $(date -u +%F)"
{
  machine_line
  echo "ganesha: $ganesha_version; keel: $keel_version; clients: $clients; repetitions: $repeat"
  echo "seq: --total $seq_total --in-flight $seq_in_flight; random: --file-size $rnd_size --ops $rnd_ops --queue-depth 4; meta: -n $meta_files"
} > "$out/machine.txt"
echo "results in $out (report: $out/report/index.html)"
