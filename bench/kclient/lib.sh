# Shared by the benchmarks that drive the kernel client's Debian guest
# against one Keel export (bench/krb5.sh, bench/nfs4.sh). Sourced after
# the script's options are read, with `name` (the script's), `keel` and
# `out` set: checks them, makes the private run directory `$run` (removed
# at exit, with whatever `cleanup_also` says first), and gives
# `free_port`, `xfs_export`, `keel_config`, `keel_start` and `machine_txt`.
[ "$(id -u)" -eq 0 ] || { echo "$name.sh: run as root" >&2; exit 1; }
[ -x "$keel" ] || { echo "$name.sh: no server binary $keel: cargo build --release -p keel, or give --keel" >&2; exit 1; }
if [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "$name.sh: $out already holds results; give another --out" >&2; exit 2
fi
mkdir -p "$out"
run=$(mktemp -d "/var/tmp/keel-$name-bench.XXXXXX")
chmod 700 "$run"
keel_pid= cleanup_also=
kclient_cleanup() {
  [ -n "$keel_pid" ] && kill "$keel_pid" 2>/dev/null && wait "$keel_pid" 2>/dev/null
  eval "$cleanup_also"
  rm -rf "$run"
}
trap kclient_cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# xfs_export SIZE: a fresh XFS of SIZE (a sparse image in $run) mounted
# at $run/export, unmounted at exit; open to everyone (1777), as the
# guest's users write there squashed.
xfs_export() {
  cleanup_also='mountpoint -q "$run/export" && umount "$run/export"'
  truncate -s "$1" "$run/xfs.img"
  mkfs.xfs -q -f "$run/xfs.img"
  mkdir "$run/export"
  mount -o loop "$run/xfs.img" "$run/export"
  chmod 1777 "$run/export"
}

# keel_config PORT ACCESS: $run/keel.toml, NFSv3, 4.1 and 4.2 on
# 127.0.0.1:PORT serving $run/export as export 1 with ACCESS (rw or ro) to
# every client from any port (qemu's user network NATs the guest), root
# squashed; $keel_conf (lines, empty by default) goes into [server].
keel_config() {
  mkdir -m 700 -p "$run/state"
  cat > "$run/keel.toml" <<CONF
[server]
listen = ["127.0.0.1:$1"]
portmap = "off"
state_dir = "$run/state"
nfs_versions = ["3", "4.1", "4.2"]
${keel_conf:-}
[[export]]
path = "$run/export"
id = 1
access = "$2"
insecure = true
clients = [{ host = "*" }]
CONF
}

# keel_start PORT CONFIG [VAR=VALUE...]: Keel serving CONFIG (in the
# environment given), its output in $out, once PORT answers.
keel_start() {
  local port=$1 config=$2
  shift 2
  env "$@" "$keel" serve --config "$config" > "$out/keel.out" 2> "$out/keel.log" &
  keel_pid=$!
  for _ in $(seq 100); do bash -c "echo > /dev/tcp/127.0.0.1/$port" 2>/dev/null && break; sleep 0.2; done
}

# The machine and the load at the start, into $out/machine.txt.
machine_txt() {
  { uname -a; nproc; grep -m1 'model name' /proc/cpuinfo; uptime; "$keel" --version 2>/dev/null || true; } > "$out/machine.txt"
}
