#!/usr/bin/env bash
# Does NFSv4.2 READ_PLUS pay (issue 29: "READ_PLUS if it pays")? The Linux
# 6.12 kernel client (Debian 13's, booted by tools/kernel-nfs-client
# --kernel trixie; it reads every file with READ_PLUS when the server serves
# it, and with READ when it answers NFS4ERR_NOTSUPP) reads three 64 MiB
# files of one export on a fresh XFS, mounted vers=4.2, from Keel with
# READ_PLUS (--keel) and from a Keel without it (--keel-old, e.g. a build of
# a commit before it), the two alternating in every round:
#
# - dense: no holes (what READ_PLUS must not make slower),
# - half: 1 MiB of data, then a 1 MiB hole, and so on,
# - sparse: 4 MiB of data at the start, a hole to the end.
#
# Each file is read twice after the guest drops its caches: buffered
# (dd bs=1M: the client's readahead keeps several READs in flight) and
# with O_DIRECT (dd bs=1M iflag=direct: one in flight). MiB/s per read,
# timed in the guest; and what the client received for all of it
# (mountstats, READ and READ_PLUS).
#
#   sudo bench/read-plus.sh --keel-old BINARY [--keel BINARY] [--rounds N] [--out DIR]
#
# Results in DIR (default bench/results/read-plus-DATE): results.tsv (every
# read), table.md (medians), machine.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
keel=$repo/target/release/keel keel_old=""
out=$repo/bench/results/read-plus-$(date -u +%Y%m%dT%H%M%SZ)
rounds=5
while [ $# -gt 0 ]; do
  case "$1" in
    --keel) keel=$(realpath "$2"); shift 2;;
    --keel-old) keel_old=$(realpath "$2"); shift 2;;
    --rounds) rounds=$2; shift 2;;
    --out) out=$2; shift 2;;
    *) echo "read-plus.sh: unknown option $1 (see the header of $0)" >&2; exit 2;;
  esac
done
[ -x "$keel_old" ] || { echo "read-plus.sh: give --keel-old, a server binary without READ_PLUS" >&2; exit 2; }
name=read-plus
. "$here/kclient/lib.sh"
xfs_export 1G
python3 - "$run/export" <<'PY'
import os, sys
MIB = 1 << 20
d = sys.argv[1]
block = os.urandom(MIB)
for name, runs in [("dense", [(i, 1) for i in range(64)]), ("half", [(i, 1) for i in range(0, 64, 2)]), ("sparse", [(0, 4)])]:
    with open(os.path.join(d, name), "wb") as f:
        for at, n in runs:
            f.seek(at * MIB)
            for _ in range(n):
                f.write(block)
        f.truncate(64 * MIB)
        os.fsync(f.fileno())
PY
machine_txt
port=$(free_port)
keel_config "$port" ro
cat > "$run/guest.sh" <<'EOF'
exec </dev/null
now() { awk '{ printf "%d", $1 * 100 }' /proc/uptime; }
for f in dense half sparse; do
  for how in buffered direct; do
    flag=""; [ $how = direct ] && flag="iflag=direct"
    sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(now); dd if=$f of=/dev/null bs=1M $flag 2>/dev/null || { echo "RESULT error=$f $how"; exit 1; }; t1=$(now)
    echo "RESULT $f-$how=$((t1 - t0))"
  done
done
for op in READ READ_PLUS; do
  echo "RESULT $op=$(awk -v op="$op:" '$1 == op { print $2 " " $6; exit }' /proc/self/mountstats)"
done
EOF
printf 'round\tserver\tfile\tread\tMiB_per_s\n' > "$out/results.tsv"
printf 'round\tserver\top\tcalls\tbytes_received\n' > "$out/wire.tsv"
for r in $(seq "$rounds"); do
  for which in old new; do
    bin=$keel; [ $which = old ] && bin=$keel_old
    keel=$bin keel_start "$port" "$run/keel.toml"
    log=$(bash "$repo/tools/kernel-nfs-client/run.sh" --kernel trixie --port "$port" --vers 4.2 \
      --export "$run/export" --timeout 600 "$run/guest.sh")
    kill "$keel_pid"; wait "$keel_pid" 2>/dev/null || true; keel_pid=
    echo "$log" | grep -q 'RESULT error' && { echo "$log" >&2; exit 1; }
    for f in dense half sparse; do
      for how in buffered direct; do
        cs=$(echo "$log" | sed -n "s/.*RESULT $f-$how=\([0-9]*\).*/\1/p")
        [ -n "$cs" ] || { echo "$log" >&2; echo "read-plus.sh: no $f-$how in the guest's output" >&2; exit 1; }
        printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$which" "$f" "$how" "$(python3 -c "print(round(64 / max($cs, 1) * 100, 1))")" >> "$out/results.tsv"
      done
    done
    for op in READ READ_PLUS; do
      v=$(echo "$log" | sed -n "s/.*RESULT $op=\([0-9]*\) \([0-9]*\).*/\1\t\2/p")
      printf '%s\t%s\t%s\t%s\n' "$r" "$which" "$op" "${v:-0	0}" >> "$out/wire.tsv"
    done
    echo "round $r $which done" >&2
  done
done
python3 - "$out" <<'PY'
import csv, statistics, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/results.tsv"), delimiter="\t"))
wire = list(csv.DictReader(open(f"{out}/wire.tsv"), delimiter="\t"))
med = lambda xs: statistics.median(xs) if xs else float("nan")
lines = ["Medians over the rounds, MiB/s (64 MiB per file), Linux 6.12 client, vers=4.2.", "",
         "| file | read | without READ_PLUS | with READ_PLUS | ratio |", "|---|---|---|---|---|"]
for f in ["dense", "half", "sparse"]:
    for how in ["buffered", "direct"]:
        v = {w: med([float(r["MiB_per_s"]) for r in rows if r["server"] == w and r["file"] == f and r["read"] == how]) for w in ["old", "new"]}
        lines.append(f"| {f} | {how} | {v['old']:.1f} | {v['new']:.1f} | {v['new'] / v['old']:.2f}x |")
lines += ["", "Received by the client per round (all six reads), median:", "",
          "| server | READ calls | READ MiB | READ_PLUS calls | READ_PLUS MiB |", "|---|---|---|---|---|"]
for w, label in [("old", "without READ_PLUS"), ("new", "with READ_PLUS")]:
    g = lambda op, k: med([float(r[k]) for r in wire if r["server"] == w and r["op"] == op])
    lines.append(f"| {label} | {g('READ', 'calls'):.0f} | {g('READ', 'bytes_received') / 2**20:.1f} | {g('READ_PLUS', 'calls'):.0f} | {g('READ_PLUS', 'bytes_received') / 2**20:.1f} |")
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
echo "results in $out" >&2
