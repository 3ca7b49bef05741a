#!/usr/bin/env bash
# pynfs, the independent NFSv4.1 conformance suite (its nfs4.1 server
# tests, `testserver.py`), against Keel: one Keel with its default
# settings (or those --keel-conf adds) serving a fresh XFS on a loop
# device, root not squashed (pynfs calls as root) and open to unprivileged
# ports (pynfs binds none), on 127.0.0.1.
#
# pynfs is not packaged by Debian or PyPI: give a checkout of it
# (git://git.linux-nfs.org/projects/cdmackay/pynfs.git, or a mirror) with
# --pynfs; its XDR code is generated here if it is not yet (`setup.py
# build`, which needs python3-ply). Keel's figures from a run are in
# docs/conformance.md.
#
#   sudo bench/pynfs.sh --pynfs DIR [--keel BINARY] [--minor 1|2]
#                       [--keel-conf SETTING] [--out DIR] [CODES...]
#
# PYTHON: the interpreter (default /usr/bin/python3, Debian's, which
# has python3-ply and xdrlib).
# CODES: pynfs's test codes and flags (default: all). --rundeps is always
# given, so a test's prerequisites run too.
# The restart tests (st_reboot.py: REBT1 ... REBT5, flag `reboot`, not in
# `all`; e.g. `all reboot`, or `REBT1 REBT2a`) have pynfs restart the
# server: bench/pynfs-serverhelper.sh (pynfs's --serverhelper) kills Keel
# with SIGKILL and starts it again on the same state_dir and export. Each
# waits out a lease after its restart (90 s by default; --keel-conf
# 'nfs4_lease_seconds = 20' shortens them). Those of 100 and 1000 clients
# (REBT2b, 2c, 3b, 3c, 4b, 4c) exceed the client IDs Keel admits from one
# address and fail on NFS4ERR_DELAY (see docs/conformance.md).
# Results in DIR (default bench/results/pynfs-DATE): pynfs.txt (its
# report), keel.log (every Keel's stderr, restarts marked), keel.toml,
# machine.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
keel=$repo/target/release/keel
out=$repo/bench/results/pynfs-$(date -u +%Y%m%dT%H%M%SZ)
pynfs="" minor=1 keel_conf= py=${PYTHON:-/usr/bin/python3}
while [ $# -gt 0 ]; do
  case "$1" in
    --pynfs) pynfs=$(realpath "$2"); shift 2;;
    --keel) keel=$(realpath "$2"); shift 2;;
    --minor) minor=$2; shift 2;;
    --keel-conf) keel_conf+="$2"$'\n'; shift 2;;
    --out) out=$2; shift 2;;
    -*) echo "pynfs.sh: unknown option $1 (see the header of $0)" >&2; exit 2;;
    *) break;;
  esac
done
codes=("$@")
[ ${#codes[@]} -gt 0 ] || codes=(all)
[ -x "$pynfs/nfs4.1/testserver.py" ] || { echo "pynfs.sh: give --pynfs, a pynfs checkout (no nfs4.1/testserver.py in '$pynfs')" >&2; exit 2; }
"$py" -c "import ply" 2>/dev/null || { echo "pynfs.sh: pynfs needs PLY: apt install python3-ply" >&2; exit 2; }
name=pynfs
. "$here/kclient/lib.sh"

if [ ! -e "$pynfs/nfs4.1/xdrdef/nfs4_const.py" ]; then
  (cd "$pynfs" && "$py" setup.py build) > "$out/pynfs-build.log" 2>&1 ||
    { tail -20 "$out/pynfs-build.log" >&2; exit 1; }
fi
xfs_export 2G
port=$(free_port)
keel_config "$port" rw
# pynfs calls as root and makes files of other owners: not squashed.
sed -i 's/^clients = .*/clients = [{ host = "127.0.0.1" }]\nsquash = "no_root_squash"/' "$run/keel.toml"
cp "$run/keel.toml" "$out/keel.toml"
keel_start "$port" "$run/keel.toml"
# For pynfs-serverhelper.sh (run by pynfs from its own directory: absolute
# paths): which Keel to restart, and how.
echo "$keel_pid" > "$run/keel.pid"
cat > "$run/serverhelper.env" <<ENV
keel=$(printf %q "$keel") config=$(printf %q "$run/keel.toml") port=$port
pidfile=$(printf %q "$run/keel.pid") log=$(printf %q "$(realpath "$out")/keel.log")
ENV
# A restarted Keel is not this shell's child: stopped by its process id,
# before the export is unmounted.
cleanup_also='keel_stop_restarted; '$cleanup_also
keel_stop_restarted() {
  restarted=$(cat "$run/keel.pid")
  if [ "$restarted" != "$keel_pid" ] && kill "$restarted" 2>/dev/null; then
    for _ in $(seq 100); do kill -0 "$restarted" 2>/dev/null || break; sleep 0.1; done
  fi
}
machine_txt
(cd "$pynfs" && git rev-parse HEAD 2>/dev/null || true) > "$out/pynfs-version.txt"

status=0
(cd "$pynfs/nfs4.1" && timeout 3600 "$py" ./testserver.py "127.0.0.1:$port$run/export" \
  --minorversion "$minor" --maketree --rundeps \
  --serverhelper "$here/pynfs-serverhelper.sh" --serverhelperarg "$run" \
  ${PYNFS_OPTS:-} "${codes[@]}") > "$out/pynfs.txt" 2>&1 || status=$?
if ! kill -0 "$(cat "$run/keel.pid")" 2>/dev/null; then
  echo "pynfs.sh: Keel exited during the run (see $out/keel.log)" >&2; status=1
fi
grep -q panicked "$out/keel.log" && { echo "pynfs.sh: Keel panicked (see $out/keel.log)" >&2; status=1; }
tail -3 "$out/pynfs.txt"
echo "pynfs.sh: results in $out"
exit "$status"
