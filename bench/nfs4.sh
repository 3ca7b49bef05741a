#!/usr/bin/env bash
# NFSv4.1 and 4.2 against NFSv3 (issue 29): the Linux kernel client (the
# Debian guest of tools/kernel-nfs-client) against one Keel export on a fresh
# XFS, mounted three times (vers=3, vers=4.1, vers=4.2), in one run; per
# round and version (the versions alternate in every round):
#
# - metadata: --files files created (creat(), as mdtest does; then close), stat'ed after
#   the guest's caches are dropped, and removed, from one process (perl),
#   in a fresh directory: files/s per phase, timed by the process itself
#   (as mdtest; not its start),
# - a 1 MiB sequential write of --mib MiB (dd bs=1M, conv=fsync),
# - its sequential read after the caches are dropped (dd bs=1M),
# - --reads 4 KiB reads at random offsets of that file, one in flight,
#   O_DIRECT.
#
# --procs N (default 1) runs the metadata phases and the random reads from
# N processes at once (N calls in flight; each process creates, stats and
# removes FILES/N files in a directory of its own, and reads READS/N
# times); the 1 MiB sequential write and read stay one process.
#
# The goals: v4.1 metadata at least 0.9x v3's rate, its I/O at v3's rate.
# The table shows medians over the rounds and each v4 figure as a share of
# v3's.
#
# The client is a qemu VM under software emulation (no KVM here) on the same
# 2 cores as the server: its CPU bounds every figure, and NFSv4's heavier
# client (open state, compounds) costs the guest more CPU per call than v3's.
# Read the ratios as what this client gets, not as Keel's ceiling.
#
#   sudo bench/nfs4.sh [--keel BINARY] [--rounds N] [--files N] [--mib M] [--reads N] [--procs N]
#                      [--keel-conf SETTING] [--out DIR]
#
# --keel-conf: a line for the server's [server] section, e.g.
#         'nfs4_write_delegations = true' (repeat it for more).
# --keel: the server binary (default target/release/keel; build it with
#         cargo build --release -p keel).
# Results in DIR (default bench/results/nfs4-DATE): results.tsv (every
# round), table.md, stat.txt (keel stat at the end), guest.log, keel.log,
# machine.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
keel=$repo/target/release/keel
out=$repo/bench/results/nfs4-$(date -u +%Y%m%dT%H%M%SZ)
rounds=3 files=1000 mib=64 reads=2000 procs=1 keel_conf=
while [ $# -gt 0 ]; do
  case "$1" in
    --keel) keel=$(realpath "$2"); shift 2;;
    --rounds) rounds=$2; shift 2;;
    --files) files=$2; shift 2;;
    --mib) mib=$2; shift 2;;
    --reads) reads=$2; shift 2;;
    --procs) procs=$2; shift 2;;
    --keel-conf) keel_conf+="$2"$'\n'; shift 2;;
    --out) out=$2; shift 2;;
    *) echo "nfs4.sh: unknown option $1 (see the header of $0)" >&2; exit 2;;
  esac
done
name=nfs4
. "$here/kclient/lib.sh"
xfs_export 2G

port=$(free_port)
keel_config "$port" rw
keel_start "$port" "$run/keel.toml"

printf 'rounds=%s\nfiles=%s\nmib=%s\nreads=%s\nprocs=%s\nport=%s\nexport=%s\n' "$rounds" "$files" "$mib" "$reads" "$procs" "$port" "$run/export" > "$run/bench.env"
machine_txt
cat "$run/bench.env" >> "$out/machine.txt"
cp "$run/keel.toml" "$out/keel.toml"
"$repo/tools/kernel-nfs-client/run.sh" --guest debian --vers 3 --port "$port" \
  --export "$run/export" --timeout 3000 --file "$run/bench.env" --file "$here/kclient/guest-lib.sh" \
  "$here/nfs4/guest.sh" > "$out/guest.log" 2>&1 || { tail -40 "$out/guest.log" >&2; exit 1; }
grep -q 'RESULT done=1' "$out/guest.log" || { tail -40 "$out/guest.log" >&2; exit 1; }
# The server's side: calls and latency per procedure and v4 operation.
"$keel" stat --config "$run/keel.toml" > "$out/stat.txt" 2>&1 || true

# "RESULT row=version round test value" lines: files/s for the metadata
# phases, MiB/s for write and read, IOPS for rand4k.
sed -n 's/.*RESULT row=//p' "$out/guest.log" | tr ' ' '\t' > "$out/results.tsv"
python3 - "$out/results.tsv" > "$out/table.md" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
med = {}
for vers, _round, test, value in rows:
    med.setdefault((vers, test), []).append(float(value))
med = {k: statistics.median(v) for k, v in med.items()}
tests = [("create", "create, files/s"), ("stat", "stat, files/s"), ("remove", "remove, files/s"),
         ("write", "1 MiB seq write, MiB/s"), ("read", "1 MiB seq read, MiB/s"),
         ("rand4k", "4 KiB random read, IOPS")]
print("| version | " + " | ".join(t for _, t in tests) + " |")
print("|---|" + "---|" * len(tests))
for vers in ["3", "4.1", "4.2"]:
    cells = []
    for test, _ in tests:
        v, base = med.get((vers, test)), med.get(("3", test))
        if v is None:
            cells.append("-")
        elif vers == "3" or not base:
            cells.append(f"{v:.1f}")
        else:
            cells.append(f"{v:.1f} ({v / base:.2f}x)")
    print(f"| {vers} | " + " | ".join(cells) + " |")
PY
cat "$out/table.md"
echo "nfs4.sh: results in $out"
