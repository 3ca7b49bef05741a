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
#   sudo bench/compare.sh [--quick] [--out DIR] [--data DIR] [--clients 1,2,4,8] [--repeat N]
#
# --data: where the two export directories go (default /var/tmp/keel-compare;
#         put it on the file system you care about, e.g. an XFS).
# --quick: small sizes, for a smoke run (a minute or two).
# Everything runs in a private network namespace (with its own rpcbind,
# which Ganesha insists on), so nothing on the host's ports is disturbed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out=$repo/bench/results/compare-$(date -u +%Y%m%dT%H%M%SZ)
data=/var/tmp/keel-compare
clients=1,2,4,8
repeat=3
seq_total=4G; rnd_size=256M; rnd_ops=20000; meta_files=2000
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) seq_total=256M; rnd_size=32M; rnd_ops=2000; meta_files=200; repeat=1; clients=1,2; shift;;
    --out) out=$2; shift 2;;
    --data) data=$2; shift 2;;
    --clients) clients=$2; shift 2;;
    --repeat) repeat=$2; shift 2;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "compare.sh: run as root" >&2; exit 1; }

need=()
command -v ganesha.nfsd >/dev/null || need+=(nfs-ganesha)
[ -e /usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so ] || ls /usr/lib/*/ganesha/libfsalvfs.so >/dev/null 2>&1 || need+=(nfs-ganesha-vfs)
command -v rpcbind >/dev/null || need+=(rpcbind)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
(cd "$repo" && cargo build --release -q -p keel)
keel=$repo/target/release/keel

ns=keel-compare-$$
mkdir -p "$out" "$data"
run=$(mktemp -d "$data/run.XXXXXX")
mkdir -p "$run/ganesha" "$run/keel-sync" "$run/keel-async" "$run/keel-state"
cleanup() {
  # Ganesha may take its time over SIGTERM: wait a little, then insist.
  if [ -n "${pids:-}" ]; then
    kill $pids 2>/dev/null || true
    for _ in $(seq 50); do kill -0 $pids 2>/dev/null || break; sleep 0.2; done
    kill -9 $pids 2>/dev/null || true
  fi
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "$run"
}
trap cleanup EXIT
ip netns add "$ns"
ip netns exec "$ns" ip link set lo up
inns() { ip netns exec "$ns" "$@"; }
# A server in the background; its pid (ip netns exec becomes the command) is kept for the cleanup.
serve() { ip netns exec "$ns" "$@" & pids="${pids:-} $!"; }

cat > "$run/ganesha.conf" <<CONF
NFS_CORE_PARAM { NFS_Port = 2049; MNT_Port = 20048; Protocols = 3; Enable_NLM = false; Enable_RQUOTA = false; }
NFSV4 { Graceless = true; }
NFS_KRB5 { Active_krb5 = false; }
EXPORT {
    Export_Id = 1; Path = $run/ganesha; Pseudo = $run/ganesha;
    Protocols = 3; Transports = TCP; Access_Type = RW; Squash = No_Root_Squash; SecType = sys;
    FSAL { Name = VFS; }
}
LOG { Default_Log_Level = WARN; }
CONF
serve unshare --mount sh -c 'mount -t tmpfs tmp /run && exec rpcbind -f -w'
# Ganesha registers with rpcbind as it starts and does not come up without it.
for _ in $(seq 100); do inns ss -ltnH | grep -q ':111 ' && break; sleep 0.1; done
serve ganesha.nfsd -F -L "$out/ganesha.log" -f "$run/ganesha.conf" -p "$run/ganesha.pid" -N NIV_WARN
cat > "$run/keel.toml" <<CONF
[server]
listen = ["127.0.0.1:2050"]
portmap = "off"
state_dir = "$run/keel-state"
[[export]]
path = "$run/keel-sync"
id = 1
access = "rw"
squash = "no_root_squash"
clients = [{ host = "*" }]
[[export]]
path = "$run/keel-async"
id = 2
access = "rw"
sync = false
squash = "no_root_squash"
clients = [{ host = "*" }]
CONF
serve "$keel" serve --config "$run/keel.toml" > "$out/keel.out" 2> "$out/keel.log"
for port in 2049 2050; do
  for _ in $(seq 100); do inns bash -c "echo > /dev/tcp/127.0.0.1/$port" 2>/dev/null && break; sleep 0.2; done
done

ganesha_version=$(ganesha.nfsd -v 2>&1 | sed -n 's/.*Release = V\?//p' | head -1)
keel_version=$("$keel" --version | awk '{print $2}')
fs=$(findmnt -no FSTYPE -T "$run")
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
run_ganesha seq --total "$seq_total"; run_keel seq --total "$seq_total"
run_keel random --file-size "$rnd_size" --ops "$rnd_ops" --queue-depth 4
run_ganesha random --file-size "$rnd_size" --ops "$rnd_ops" --queue-depth 4
run_ganesha meta -n "$meta_files"; run_keel meta -n "$meta_files"
"$keel" report "$out"/*.json --output "$out/report" --baseline ganesha --title "Keel vs NFS-Ganesha, $(hostname), $(date -u +%F)"
{
  echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), data on $fs"
  echo "ganesha: $ganesha_version; keel: $keel_version; clients: $clients; repetitions: $repeat"
  echo "seq: --total $seq_total; random: --file-size $rnd_size --ops $rnd_ops --queue-depth 4; meta: -n $meta_files"
} > "$out/machine.txt"
echo "results in $out (report: $out/report/index.html)"
