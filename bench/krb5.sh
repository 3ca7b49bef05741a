#!/usr/bin/env bash
# What Kerberos costs (issue 31): the Linux kernel client (the Debian guest
# of tools/kernel-nfs-client, with rpc.gssd) against one Keel export that
# accepts sys, krb5, krb5i and krb5p, with tools/krb5-lab's KDC, in one run:
# for each flavor a mount of the same export, then per round and flavor (the
# flavors alternate in every round)
#
# - a 1 MiB sequential write of --mib MiB (dd bs=1M, conv=fsync),
# - its sequential read after the guest's caches are dropped (dd bs=1M),
# - --reads 4 KiB reads at random offsets of that file, one in flight,
#   O_DIRECT (a perl loop: fio is not in the guest's image),
# - --syncs 4 KiB O_DIRECT reads and --syncs 4 KiB O_DIRECT|O_DSYNC writes
#   (each a stable WRITE) at random offsets, one in flight: microseconds
#   per call and each flavor's difference to sys.
#
# Then, without qemu, the per-call cost with Keel's own RPCSEC_GSS client
# (tests/kerberos.rs's, built on MIT's GSS-API like the server) on
# loopback against the same server binary, its own export with the same
# four flavors, one call in flight: microseconds per GETATTR, per 1 MiB
# READ and per 1 MiB (unstable) WRITE, flavors alternating in each of
# --rounds rounds; "server" is the round trip less the client's own work
# (building and signing or sealing the call, checking or unsealing the
# reply). That needs the test binary: cargo test --release -p keel --test
# kerberos --no-run (the script runs it with cargo; --no-per-call skips it).
#
# The I/O is root's in the guest: the machine's credential with Kerberos
# (Keel maps it to the anonymous user), AUTH_SYS root squashed to the same
# user. The table shows medians over the rounds and each Kerberos flavor's
# share of sys's figure; the goals are krb5 >= 95 %, krb5i >= 80 % and
# krb5p >= 50 % of sys on sequential I/O.
#
# The client is a qemu VM under software emulation (no KVM here): its CPU,
# not the server's, bounds every figure, and the guest's AES is emulated.
# Read the ratios as the cost of each level to this client, not as Keel's
# ceiling.
#
#   sudo bench/krb5.sh [--keel BINARY] [--rounds N] [--mib M] [--reads N] [--syncs N]
#                      [--guest-cpu MODEL] [--no-per-call] [--out DIR]
#
# --guest-cpu MODEL: the guest's qemu CPU model (tools/kernel-nfs-client's
#         --cpu): `max` gives the client AES-NI (emulated) and its kernel's
#         AES-NI and SHA-1 drivers, as a client on real hardware has; the
#         guest log names the drivers its Kerberos used.
#
# --keel: the server binary (default target/release/keel; build it with
#         cargo build --release -p keel).
# Results in DIR (default bench/results/krb5-DATE): results.tsv (every
# round), percall.tsv, table.md, guest.log, percall.log, keel.log, machine.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
keel=$repo/target/release/keel
out=$repo/bench/results/krb5-$(date -u +%Y%m%dT%H%M%SZ)
rounds=3 mib=64 reads=2000 syncs=500 per_call=1 guest_cpu=""
while [ $# -gt 0 ]; do
  case "$1" in
    --keel) keel=$(realpath "$2"); shift 2;;
    --rounds) rounds=$2; shift 2;;
    --mib) mib=$2; shift 2;;
    --reads) reads=$2; shift 2;;
    --syncs) syncs=$2; shift 2;;
    --no-per-call) per_call=""; shift;;
    --guest-cpu) guest_cpu=$2; shift 2;;
    --out) out=$2; shift 2;;
    *) echo "krb5.sh: unknown option $1 (see the header of $0)" >&2; exit 2;;
  esac
done
name=krb5
. "$here/kclient/lib.sh"
lab=$run/lab
cleanup_also='"$repo/tools/krb5-lab/stop.sh" "$lab" >/dev/null 2>&1 || true'
"$repo/tools/krb5-lab/setup.sh" "$lab" --port "$(free_port)" >/dev/null

port=$(free_port)
mkdir -m 700 "$run/state"
mkdir -m 1777 "$run/export"
cat > "$run/keel.toml" <<CONF
[server]
listen = ["127.0.0.1:$port"]
portmap = "off"
state_dir = "$run/state"
nfs_versions = ["3", "4.1", "4.2"]
keytab = "$lab/server.keytab"
principal = "nfs/server.keel.test"
[[export]]
path = "$run/export"
id = 1
access = "rw"
insecure = true
sec = ["sys", "krb5", "krb5i", "krb5p"]
clients = [{ host = "*" }]
CONF
keel_start "$port" "$run/keel.toml" KRB5_CONFIG="$lab/krb5.conf"

printf 'rounds=%s\nmib=%s\nreads=%s\nsyncs=%s\nport=%s\nexport=%s\n' "$rounds" "$mib" "$reads" "$syncs" "$port" "$run/export" > "$run/bench.env"
machine_txt
echo "guest_cpu=${guest_cpu:-qemu default}" >> "$out/machine.txt"
"$repo/tools/kernel-nfs-client/run.sh" --guest debian --krb5 "$lab/guest" ${guest_cpu:+--cpu "$guest_cpu"} \
  --hostname client.keel.test --server-name server.keel.test --port "$port" \
  --export "$run/export" --opts sec=sys --timeout 3000 --file "$run/bench.env" \
  --file "$here/kclient/guest-lib.sh" \
  "$here/krb5/guest.sh" > "$out/guest.log" 2>&1 || { tail -40 "$out/guest.log" >&2; exit 1; }
grep -q 'RESULT done=1' "$out/guest.log" || { tail -40 "$out/guest.log" >&2; exit 1; }

# "RESULT row=flavor round test value" lines: MiB/s for write and read,
# IOPS for rand4k, microseconds for read4k_us and write4k_us.
sed -n 's/.*RESULT row=//p' "$out/guest.log" | tr ' ' '\t' > "$out/results.tsv"
kill "$keel_pid" 2>/dev/null; wait "$keel_pid" 2>/dev/null || true
keel_pid=

# The per-call cost without qemu: "RESULT percall=flavor round op us client_us".
if [ -n "$per_call" ]; then
  KEEL_BIN=$keel KEEL_BENCH_ROUNDS=$rounds \
    cargo test --release --quiet --manifest-path "$repo/Cargo.toml" -p keel --test kerberos -- \
    --ignored --exact served::bench_per_call_cost_at_one_call_in_flight --nocapture > "$out/percall.log" 2>&1 ||
    { tail -40 "$out/percall.log" >&2; exit 1; }
  sed -n 's/.*RESULT percall=//p' "$out/percall.log" | tr ' ' '\t' > "$out/percall.tsv"
  uptime >> "$out/machine.txt"
fi

python3 - "$out/results.tsv" "$out/percall.tsv" > "$out/table.md" <<'PY'
import os, statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
med = {}
for flavor, _round, test, value in rows:
    med.setdefault((flavor, test), []).append(float(value))
med = {k: statistics.median(v) for k, v in med.items()}
flavors = ["sys", "krb5", "krb5i", "krb5p"]
goals = {"krb5": 95, "krb5i": 80, "krb5p": 50}
tests = [("write", "1 MiB seq write, MiB/s"), ("read", "1 MiB seq read, MiB/s"), ("rand4k", "4 KiB random read, IOPS")]
print("Kernel client (Debian guest under TCG qemu), medians of the rounds:\n")
print("| flavor | " + " | ".join(t for _, t in tests) + " | goal (seq) |")
print("|---|" + "---|" * (len(tests) + 1))
for flavor in flavors:
    cells = []
    for test, _ in tests:
        v, base = med.get((flavor, test)), med.get(("sys", test))
        if v is None:
            cells.append("-")
        elif flavor == "sys" or not base:
            cells.append(f"{v:.1f}")
        else:
            cells.append(f"{v:.1f} ({100 * v / base:.0f} %)")
    goal = f">= {goals[flavor]} %" if flavor in goals else ""
    print(f"| {flavor} | " + " | ".join(cells) + f" | {goal} |")

def us_table(title, ops, value):
    print(f"\n{title}\n")
    print("| flavor | " + " | ".join(name for _, name in ops) + " |")
    print("|---|" + "---|" * len(ops))
    for flavor in flavors:
        cells = []
        for op, _ in ops:
            v, base = value(flavor, op), value("sys", op)
            if v is None:
                cells.append("-")
            elif flavor == "sys" or base is None:
                cells.append(f"{v:.0f}")
            else:
                cells.append(f"{v:.0f} ({v - base:+.0f})")
        print(f"| {flavor} | " + " | ".join(cells) + " |")

us_table("Kernel client, one call in flight, microseconds per call (difference to sys):",
         [("read4k_us", "4 KiB O_DIRECT read"), ("write4k_us", "4 KiB O_DIRECT|O_DSYNC write")],
         lambda f, op: med.get((f, op)))
if os.path.getsize(sys.argv[2]) if os.path.exists(sys.argv[2]) else False:
    per = {}
    for line in open(sys.argv[2]).read().split("\n"):
        if line:
            flavor, _round, op, us, client_us = line.split("\t")
            per.setdefault((flavor, op), []).append((float(us), float(us) - float(client_us)))
    total = {k: statistics.median(u for u, _ in v) for k, v in per.items()}
    server = {k: statistics.median(s for _, s in v) for k, v in per.items()}
    ops = [("getattr", "GETATTR"), ("read1m", "1 MiB READ"), ("write1m", "1 MiB WRITE")]
    us_table("Keel's own GSS client on loopback (no qemu), one call in flight, microseconds per call round trip (difference to sys):",
             ops, lambda f, op: total.get((f, op)))
    us_table("The same less the client's own work (signing, sealing, unsealing, XDR): the server and loopback's share:",
             ops, lambda f, op: server.get((f, op)))
PY
cat "$out/table.md"
echo "krb5.sh: results in $out"
