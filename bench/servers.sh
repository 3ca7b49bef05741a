# Sourced by compare.sh and heldout.sh: NFS-Ganesha and Keel side by side
# in a private network namespace (with its own rpcbind, which Ganesha
# insists on), exporting directories of the same file system.
#
#   servers_start DATA OUT    installs what is missing, builds Keel, starts
#                             both; sets ns, run, keel, fs, the versions
#                             and the servers' pids (ganesha_pid, keel_pid)
#   keel_start DATA OUT       the same for Keel alone (no Ganesha, no
#                             rpcbind: Keel's portmapper is off)
#   keel_serve OUT BIN PORT NAME   once started, one more Keel (another
#                             build) beside them, on PORT
#   inns CMD...               runs CMD in the namespace
#   guest_memory_hold         (also alone, e.g. bench/ab.sh) on a VM that
#                             gives freed memory back to its host, stops
#                             that for the run and touches free memory
#
# Ganesha serves $run/ganesha on port 2049 (MOUNT on 20048); Keel serves
# $run/keel-sync (export 1, sync) and $run/keel-async (export 2) on 2050
# (MOUNT, NLM and NSM on the same port). Everything is stopped and removed
# on exit.

servers_start() {
  local data=$1 out=$2
  local need=()
  command -v ganesha.nfsd >/dev/null || need+=(nfs-ganesha)
  ls /usr/lib/*/ganesha/libfsalvfs.so >/dev/null 2>&1 || need+=(nfs-ganesha-vfs)
  command -v rpcbind >/dev/null || need+=(rpcbind)
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  ns_start "$data" "$out"
  mkdir -p "$run/ganesha"

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
  serve_in_ns unshare --mount sh -c 'mount -t tmpfs tmp /run && exec rpcbind -f -w'
  # Ganesha registers with rpcbind as it starts and does not come up without it.
  for _ in $(seq 100); do inns ss -ltnH | grep -q ':111 ' && break; sleep 0.1; done
  serve_in_ns ganesha.nfsd -F -L "$out/ganesha.log" -f "$run/ganesha.conf" -p "$run/ganesha.pid" -N NIV_WARN
  ganesha_pid=$last_pid
  keel_serve "$out"
  for _ in $(seq 100); do inns bash -c "echo > /dev/tcp/127.0.0.1/2049" 2>/dev/null && break; sleep 0.2; done
  ganesha_version=$(ganesha.nfsd -v 2>&1 | sed -n 's/.*Release = V\?//p' | head -1)
}

keel_start() {
  local data=$1 out=$2
  ns_start "$data" "$out"
  keel_serve "$out"
}

# Builds Keel and makes the namespace and the run directory.
ns_start() {
  local data=$1 out=$2
  (cd "$repo" && cargo build --release -q -p keel)
  keel=$repo/target/release/keel
  keel_version=$("$keel" --version | awk '{print $2}')
  ns=keel-bench-$$
  mkdir -p "$out" "$data"
  run=$(mktemp -d "$data/run.XXXXXX")
  fs=$(findmnt -no FSTYPE -T "$run")
  mkdir -p "$run/keel-sync" "$run/keel-async"
  trap servers_cleanup EXIT
  trap 'exit 130' INT TERM
  guest_memory_hold
  ip netns add "$ns"
  ip netns exec "$ns" ip link set lo up
}

# Starts Keel in the namespace and waits for its port; with BIN PORT NAME,
# another Keel binary (e.g. main's, for an A/B in the same run) on PORT,
# exporting the same directories, with its own state, config and logs
# named NAME (pid in $last_pid).
keel_serve() {
  local out=$1 bin=${2:-$keel} port=${3:-2050} name=${4:-keel}
  mkdir -p "$run/$name-state"
  cat > "$run/$name.toml" <<CONF
[server]
listen = ["127.0.0.1:$port"]
portmap = "off"
state_dir = "$run/$name-state"
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
  serve_in_ns "$bin" serve --config "$run/$name.toml" > "$out/$name.out" 2> "$out/$name.log"
  [ "$name" = keel ] && keel_pid=$last_pid
  for _ in $(seq 100); do inns bash -c "echo > /dev/tcp/127.0.0.1/$port" 2>/dev/null && break; sleep 0.2; done
}

# With server_cpus / client_cpus set (taskset lists, e.g. 0 and 1), the
# servers run on the first CPUs and everything run through inns on the
# second, so that neither side preempts the other or is charged for its
# loopback deliveries. A server started so sees only its own CPUs
# (sched_getaffinity), as on a machine of that size.
inns() { ip netns exec "$ns" ${client_cpus:+taskset -c "$client_cpus"} "$@"; }

# A server in the background; its pid (ip netns exec and taskset become
# the command) is kept for the cleanup, and in $last_pid.
serve_in_ns() {
  ip netns exec "$ns" ${server_cpus:+taskset -c "$server_cpus"} "$@" &
  last_pid=$!; server_pids="${server_pids:-} $last_pid"
}

servers_cleanup() {
  # Ganesha may take its time over SIGTERM: wait a little, then insist.
  if [ -n "${server_pids:-}" ]; then
    kill $server_pids 2>/dev/null || true
    for _ in $(seq 50); do kill -0 $server_pids 2>/dev/null || break; sleep 0.2; done
    kill -9 $server_pids 2>/dev/null || true
  fi
  [ -n "${ns:-}" ] && ip netns del "$ns" 2>/dev/null || true
  [ -n "${run:-}" ] && rm -rf "$run"
  [ -n "${extra_cleanup:-}" ] && eval "$extra_cleanup" || true
  guest_memory_release
}

# A VM whose balloon reports free pages to its host (virtio-balloon's free
# page reporting) loses every freed 2 MiB block to the host within seconds,
# and the next write to it faults on the host. Measured on the bench VM:
# 2 GiB written into the page cache cost 1.9 s of CPU in such memory and
# 0.25 s in memory the guest had touched before; which test lands on such
# pages is chance, and it moved fio's 1 MiB writes at one call in flight
# between 354 and 1307 MiB/s through the same server. For the run, no free
# block is reported (the order is set above the largest the kernel has)
# and the free memory is touched once, as a physical machine's always is;
# the order is restored at exit. Nothing happens on a machine without it.
guest_memory_hold() {
  local param=/sys/module/page_reporting/parameters/page_reporting_order
  [ -w "$param" ] && [ -z "${reporting_order_was:-}" ] || return 0
  local was orders mib touch touched=0
  was=$(cat "$param")
  # "Node 0, zone DMA n0 n1 ...": one count per order, so the count is
  # above the largest order. A kernel that refuses it gets the largest
  # (only its rare 4 MiB blocks are then reported); one that refuses both
  # keeps its setting, and the run says so.
  orders=$(awk '{print NF - 4; exit}' /proc/buddyinfo)
  if ! { echo "$orders" > "$param" || echo $((orders - 1)) > "$param"; } 2>/dev/null; then
    memory_note="free page reporting on (the kernel refused a higher order): sequential figures may carry host faults"
    return 0
  fi
  reporting_order_was=$was
  mib=$(awk '/MemFree/ {print int($2 / 1024) - 1024}' /proc/meminfo)
  touch=$(mktemp -d /tmp/keel-touch.XXXXXX)
  if [ "$mib" -gt 0 ] && mount -t tmpfs -o size="${mib}m" keel-touch "$touch"; then
    echo "== touching $((mib / 1024)) GiB of free memory, which the host no longer takes back during the run"
    dd if=/dev/zero of="$touch/f" bs=1M count="$mib" status=none 2>/dev/null && touched=$mib
    umount "$touch"
  fi
  rmdir "$touch"
  memory_note="free page reporting held (order $was -> $(cat "$param")), $touched MiB touched first"
}

guest_memory_release() {
  [ -n "${reporting_order_was:-}" ] || return 0
  echo "$reporting_order_was" > /sys/module/page_reporting/parameters/page_reporting_order || true
  reporting_order_was=
}

machine_line() {
  echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), data on $fs${memory_note:+; $memory_note}"
}
