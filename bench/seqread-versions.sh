#!/usr/bin/env bash
# The 1 MiB sequential read over NFSv3, 4.1 and 4.2 with a second client
# kernel (issue 29: v4.1's I/O at v3's rate; bench/nfs4.sh's Debian 12 guest
# found 4.1's sequential read at 0.81x in one run and 0.91-1.06x alone):
# Debian 13's Linux 6.12 (tools/kernel-nfs-client --kernel trixie, the
# busybox guest), one boot per version and round, the versions alternating
# in every round, against one Keel export on a fresh XFS. Each boot:
#
# - reads a 64 MiB file the server made, after dropping its caches,
#   buffered (dd bs=1M: readahead keeps several READs in flight) and with
#   O_DIRECT (one in flight);
# - writes a 64 MiB file of its own (dd bs=1M conv=fsync), drops its
#   caches and reads it back buffered (bench/nfs4.sh's order).
#
# MiB/s, timed in the guest to 10 ms. The client is emulated (qemu TCG) on
# the same two cores as the server: read the ratios as this client's.
#
#   sudo bench/seqread-versions.sh [--keel BINARY] [--rounds N] [--out DIR]
#
# Results in DIR (default bench/results/seqread-versions-DATE): results.tsv,
# table.md, machine.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
keel=$repo/target/release/keel
out=$repo/bench/results/seqread-versions-$(date -u +%Y%m%dT%H%M%SZ)
rounds=5
while [ $# -gt 0 ]; do
  case "$1" in
    --keel) keel=$(realpath "$2"); shift 2;;
    --rounds) rounds=$2; shift 2;;
    --out) out=$2; shift 2;;
    *) echo "seqread-versions.sh: unknown option $1 (see the header of $0)" >&2; exit 2;;
  esac
done
name=seqread-versions
. "$here/kclient/lib.sh"
xfs_export 2G
head -c $((64 << 20)) /dev/urandom > "$run/export/made"
sync
machine_txt
port=$(free_port)
keel_config "$port" rw
cat > "$run/guest.sh" <<'EOF'
exec </dev/null
now() { awk '{ printf "%d", $1 * 100 }' /proc/uptime; }
timed() { # NAME COMMAND...: centiseconds, after dropping the caches
  local what=$1; shift
  sync; echo 3 > /proc/sys/vm/drop_caches
  local t0=$(now); "$@" 2>/dev/null || { echo "RESULT error=$what"; exit 1; }
  echo "RESULT $what=$(($(now) - t0))"
}
timed read-buffered dd if=made of=/dev/null bs=1M
timed read-direct dd if=made of=/dev/null bs=1M iflag=direct
f=own-$$-$(cat /proc/sys/kernel/random/uuid | cut -c1-8)
timed write dd if=/dev/zero of=$f bs=1M count=64 conv=fsync
timed written-read dd if=$f of=/dev/null bs=1M
rm -f $f
EOF
phases="read-buffered read-direct write written-read"
printf 'round\tvers\tphase\tMiB_per_s\n' > "$out/results.tsv"
keel_start "$port" "$run/keel.toml"
for r in $(seq "$rounds"); do
  for vers in 3 4.1 4.2; do
    log=$(bash "$repo/tools/kernel-nfs-client/run.sh" --kernel trixie --port "$port" --vers "$vers" \
      --export "$run/export" --timeout 600 "$run/guest.sh")
    echo "$log" | grep -q 'RESULT error' && { echo "$log" >&2; exit 1; }
    for p in $phases; do
      cs=$(echo "$log" | sed -n "s/.*RESULT $p=\([0-9]*\).*/\1/p")
      [ -n "$cs" ] || { echo "$log" >&2; echo "seqread-versions.sh: no $p in the guest's output" >&2; exit 1; }
      printf '%s\t%s\t%s\t%s\n' "$r" "$vers" "$p" "$(python3 -c "print(round(64 / max($cs, 1) * 100, 1))")" >> "$out/results.tsv"
    done
    echo "round $r vers $vers done" >&2
  done
done
python3 - "$out" <<'PY'
import csv, statistics, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/results.tsv"), delimiter="\t"))
med = lambda xs: statistics.median(xs)
lines = ["Medians over the rounds, MiB/s (64 MiB), Linux 6.12 client; v4 as a share of v3.", "",
         "| phase | v3 | 4.1 | 4.2 |", "|---|---|---|---|"]
for p in ["read-buffered", "read-direct", "write", "written-read"]:
    v = {x: med([float(r["MiB_per_s"]) for r in rows if r["vers"] == x and r["phase"] == p]) for x in ["3", "4.1", "4.2"]}
    lines.append(f"| {p} | {v['3']:.1f} | {v['4.1'] / v['3']:.2f}x | {v['4.2'] / v['3']:.2f}x |")
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
echo "results in $out" >&2
