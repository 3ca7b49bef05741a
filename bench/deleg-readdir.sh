#!/usr/bin/env bash
# What READDIR's per-entry delegation check costs (issue 29): since
# c201df2 each entry's attributes (when the client asks for size or
# change) look for another client's write delegation on the entry
# (crates/nfs4 ops/dir.rs as_delegated, deleg.rs holder_to_ask); with no
# write delegation granted anywhere that is one atomic load, with any
# granted it is a look-up in the server's state under its lock.
#
# A Keel export (a fresh XFS) holds a directory `list` of --files empty
# files and an empty directory `held`. Per round and condition (which
# goes first alternates by round), a fresh server with the default
# settings (delegations on), then:
# - a second client, the busybox guest of tools/kernel-nfs-client
#   (bench/delegcost/holder.sh), creating --held files in `held` and
#   keeping the write delegations it gets (condition "held"; the files are
#   removed after), or holding nothing (condition "none"; it idles all
#   the same). Keel grants a write delegation only on a file whose cached
#   description is writable (one it created or wrote: crates/store-local
#   lease.rs; opening the others for writing gets none), and at most a quarter of its delegations to one address (both
#   guests are 127.0.0.1 to it, through qemu's user networking): the
#   `keel stat` taken before the listings says how many are held.
# - the measuring client, the Debian guest (bench/delegcost/lister.sh):
#   --listings times `ls -l list`, each after its caches are dropped,
#   over NFSv4.1.
# The server's CPU per listing is read from /proc/PID/stat when the
# guest's console says a listing begins and ends
# (bench/delegcost/cpumarks.py); `keel stat` after each condition gives
# READDIR's calls and server-side latency, and the delegations held.
#
#   sudo bench/deleg-readdir.sh [--keel BINARY] [--rounds N] [--files N] [--held N]
#                               [--listings N] [--out DIR]
#
# Results in DIR (default bench/results/deleg-readdir-DATE): results.tsv
# (condition, round, listing, ms, server CPU seconds), table.md, stat-*.txt
# (keel stat before and after each condition's listings), marks.tsv, the guests' logs,
# machine.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
keel=$repo/target/release/keel
out=$repo/bench/results/deleg-readdir-$(date -u +%Y%m%dT%H%M%SZ)
rounds=3 files=10000 held=4000 listings=5
while [ $# -gt 0 ]; do
  case "$1" in
    --keel) keel=$(realpath "$2"); shift 2;;
    --rounds) rounds=$2; shift 2;;
    --files) files=$2; shift 2;;
    --held) held=$2; shift 2;;
    --listings) listings=$2; shift 2;;
    --out) out=$2; shift 2;;
    *) echo "deleg-readdir.sh: unknown option $1 (see the header of $0)" >&2; exit 2;;
  esac
done
name=deleg-readdir
. "$here/kclient/lib.sh"
xfs_export 2G
holder_pid=
stop_holder() { [ -n "$holder_pid" ] && kill -- -"$holder_pid" 2>/dev/null; holder_pid=; }
stop_keel() { [ -n "$keel_pid" ] && kill "$keel_pid" 2>/dev/null && wait "$keel_pid" 2>/dev/null; keel_pid=; }
cleanup_also="stop_holder; $cleanup_also"
python3 - "$run/export" "$files" <<'PY'
import os, sys
root, files = sys.argv[1], int(sys.argv[2])
os.mkdir(os.path.join(root, "held"), 0o777)
os.mkdir(os.path.join(root, "list"), 0o777)
for i in range(1, files + 1):
    os.close(os.open(os.path.join(root, "list", f"f{i}"), os.O_CREAT | os.O_WRONLY, 0o666))
PY
chmod -R a+rw "$run/export/list" "$run/export/held"
machine_txt
printf 'rounds=%s\nfiles=%s\nheld=%s\nlistings=%s\n' "$rounds" "$files" "$held" "$listings" >> "$out/machine.txt"

for round in $(seq "$rounds"); do
  if [ $(( round % 2 )) = 1 ]; then order="none held"; else order="held none"; fi
  for condition in $order; do
    rm -rf "$run/state"
    port=$(free_port)
    keel_config "$port" rw
    printf 'keel-bench-readdir' > "$run/state/nfs4-server-owner"
    keel_start "$port" "$run/keel.toml"
    mv "$out/keel.log" "$out/keel-$condition-$round.log"
    n=0; [ "$condition" = held ] && n=$held
    printf 'held=%s\ndir=held\n' "$n" > "$run/holder.env"
    setsid "$repo/tools/kernel-nfs-client/run.sh" --vers 4.1 --port "$port" --export "$run/export" \
      --hostname holder --timeout 3000 --file "$run/holder.env" "$here/delegcost/holder.sh" \
      > "$out/holder-$condition-$round.log" 2>&1 &
    holder_pid=$!
    for _ in $(seq 600); do grep -q 'HOLDER ready' "$out/holder-$condition-$round.log" && break; sleep 1; done
    grep -q 'HOLDER ready' "$out/holder-$condition-$round.log" || { tail -20 "$out/holder-$condition-$round.log" >&2; exit 1; }
    "$keel" stat --config "$run/keel.toml" > "$out/stat-$condition-$round-before.txt" 2>&1 || true
    printf 'listings=%s\ncondition=%s\nround=%s\n' "$listings" "$condition" "$round" > "$run/lister.env"
    set +e
    "$repo/tools/kernel-nfs-client/run.sh" --guest debian --vers 4.1 --port "$port" --export "$run/export" \
      --hostname lister --timeout 1200 --file "$run/lister.env" --file "$here/kclient/guest-lib.sh" \
      "$here/delegcost/lister.sh" 2>&1 | python3 "$here/delegcost/cpumarks.py" "$run/cpu.tsv" "$keel_pid" \
      > "$out/lister-$condition-$round.log"
    set -e
    grep -q 'RESULT done=1' "$out/lister-$condition-$round.log" || { tail -40 "$out/lister-$condition-$round.log" >&2; exit 1; }
    "$keel" stat --config "$run/keel.toml" > "$out/stat-$condition-$round.txt" 2>&1 || true
    stop_holder
    stop_keel
    rm -f "$run/export/held/"*
  done
done
cp "$run/cpu.tsv" "$out/marks.tsv"
rm -f "$out/keel.out"

# marks.tsv: "begin|end CONDITION ROUND LISTING [MS] CPU CLOCK".
python3 - "$out/marks.tsv" "$out/results.tsv" "$out" > "$out/table.md" <<'PY'
import glob, re, statistics, sys
marks, results, outdir = sys.argv[1:4]
begin, rows = {}, []
for line in open(marks):
    f = line.split()
    if f[0] == "begin":
        begin[tuple(f[1:4])] = float(f[4])
        continue
    key = tuple(f[1:4])
    rows.append((*key, int(f[4]), float(f[5]) - begin.pop(key)))
with open(results, "w") as out:
    for r in rows:
        out.write("\t".join(str(x) for x in r) + "\n")
# READDIR's line of each stat file's NFSv4 operations: calls and mean.
def readdir(path):
    text = open(path).read()
    ops = text[text.find("nfs4ops"):]
    m = re.search(r"^\s+readdir\s+(\d+)\s+\S+\s+\d+\s+(\S+)", ops, re.M)
    d = re.search(r"(\d+) delegations", open(path.replace(".txt", "-before.txt")).read())
    return int(m.group(1)), m.group(2), int(d.group(1)) if d else None
def span(values, fmt):
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}–{fmt(max(values))})"
print("| condition | delegations held by the other client | `ls -l`, ms | server CPU per listing, ms | READDIR calls per listing | server's mean READDIR per round |")
print("|---|---|---|---|---|---|")
for cond in ("none", "held"):
    sel = [r for r in rows if r[0] == cond]
    if not sel:
        continue
    stats = [readdir(p) for p in sorted(glob.glob(f"{outdir}/stat-{cond}-[0-9]*.txt")) if not p.endswith("-before.txt")]
    listings = len(sel) / len(stats)
    held = sorted({s[2] for s in stats})
    print(f"| {cond} | {', '.join(str(h) for h in held)} | {span([r[3] for r in sel], lambda v: f'{v:.0f}')} "
          f"| {span([r[4] * 1000 for r in sel], lambda v: f'{v:.0f}')} | {statistics.median(s[0] for s in stats) / listings:.0f} "
          f"| {', '.join(s[1] for s in stats)} |")
print(f"\nMedians (ranges) over every listing of every round.")
PY
cat "$out/table.md"
echo "deleg-readdir.sh: results in $out"
