#!/usr/bin/env bash
# What NFSv4.1 delegations cost a create-heavy workload (issue 29): the
# Linux kernel client (the Debian guest of tools/kernel-nfs-client)
# against two Keel servers of one binary serving one export (a fresh XFS)
# at once, one with the default settings (read and write delegations on)
# and one with both off, mounted side by side over NFSv4.1 in one boot.
# Per round, from 1 process and then from --procs processes (calls in
# flight), each server in turn (which goes first alternates by round):
# --files files created, the guest's caches dropped, the files stat'ed,
# removed, then --files files written (open, one 4 KiB write, close) and
# removed (bench/delegcost/guest.sh says how). Each server is a process
# of its own, so the CPU it spends in a phase (utime + stime from
# /proc/PID/stat, read when the guest's console says the phase begins and
# ends: bench/delegcost/cpumarks.py) is that setting's alone.
#
# The two servers have server owners of their own, so that the client
# does not take them for one server (session trunking).
#
#   sudo bench/delegcost.sh [--keel BINARY] [--rounds N] [--files N] [--procs N] [--perf] [--out DIR]
#
# --perf: profile each server through the run (perf record, DWARF call
#         graphs at 499 Hz): perf-on.txt and perf-off.txt in DIR are the
#         top of each profile by self time and by inclusive time,
#         perf-on-inclusive-all.txt and perf-off-inclusive-all.txt every
#         symbol's inclusive time (the profiling's cost is in that run's
#         figures).
#
# Results in DIR (default bench/results/delegcost-DATE): results.tsv
# (setting, round, processes, phase, files/s, server CPU seconds, wall
# seconds), table.md (medians and ranges over the rounds), stat-on.txt and
# stat-off.txt (keel stat at the end), marks.tsv (the CPU readings),
# guest.log, keel-*.log, machine.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
keel=$repo/target/release/keel
out=$repo/bench/results/delegcost-$(date -u +%Y%m%dT%H%M%SZ)
rounds=3 files=1000 procs=8 perf=
while [ $# -gt 0 ]; do
  case "$1" in
    --keel) keel=$(realpath "$2"); shift 2;;
    --rounds) rounds=$2; shift 2;;
    --files) files=$2; shift 2;;
    --procs) procs=$2; shift 2;;
    --perf) perf=1; shift;;
    --out) out=$2; shift 2;;
    *) echo "delegcost.sh: unknown option $1 (see the header of $0)" >&2; exit 2;;
  esac
done
name=delegcost
. "$here/kclient/lib.sh"
xfs_export 2G

# server SETTING PORT DELEGATIONS: a config in $run/SETTING.toml with its
# own state directory and server owner, started; its pid in pid_SETTING.
pids=()
server() {
  local setting=$1 port=$2 deleg=$3
  mkdir -m 700 -p "$run/state-$setting"
  printf 'keel-bench-%s' "$setting" > "$run/state-$setting/nfs4-server-owner"
  cat > "$run/$setting.toml" <<CONF
[server]
listen = ["127.0.0.1:$port"]
portmap = "off"
state_dir = "$run/state-$setting"
nfs_versions = ["3", "4.1", "4.2"]
nfs4_read_delegations = $deleg
nfs4_write_delegations = $deleg

[[export]]
path = "$run/export"
id = 1
access = "rw"
insecure = true
clients = [{ host = "*" }]
CONF
  "$keel" serve --config "$run/$setting.toml" > "$out/keel-$setting.out" 2> "$out/keel-$setting.log" &
  pids+=($!)
  for _ in $(seq 100); do bash -c "echo > /dev/tcp/127.0.0.1/$port" 2>/dev/null && break; sleep 0.2; done
}
stop_servers() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done; pids=(); }
cleanup_also="stop_servers; $cleanup_also"
port_on=$(free_port)
server on "$port_on" true
port_off=$(free_port)
server off "$port_off" false
pid_on=${pids[0]} pid_off=${pids[1]}

printf 'rounds=%s\nfiles=%s\nprocs=%s\nport_off=%s\nexport=%s\n' "$rounds" "$files" "$procs" "$port_off" "$run/export" > "$run/bench.env"
machine_txt
cat "$run/bench.env" >> "$out/machine.txt"
cp "$run/on.toml" "$out/keel-on.toml"
cp "$run/off.toml" "$out/keel-off.toml"
perf_pids=()
if [ -n "$perf" ]; then
  for setting in on off; do
    pid=$pid_on; [ "$setting" = off ] && pid=$pid_off
    perf record -q -F 499 --call-graph dwarf -p "$pid" -o "$run/perf-$setting.data" 2> "$run/perf-$setting.err" &
    perf_pids+=($!)
  done
fi
set +e
"$repo/tools/kernel-nfs-client/run.sh" --guest debian --vers 4.1 --port "$port_on" \
  --export "$run/export" --timeout 5000 --file "$run/bench.env" --file "$here/kclient/guest-lib.sh" \
  "$here/delegcost/guest.sh" 2>&1 | python3 "$here/delegcost/cpumarks.py" "$run/cpu.tsv" "$pid_on" "$pid_off" > "$out/guest.log"
set -e
if [ -n "$perf" ]; then
  kill -INT "${perf_pids[@]}"; wait "${perf_pids[@]}" || true
  for setting in on off; do
    # Whole reports first: head closing a pipe from perf would fail the script.
    perf report -i "$run/perf-$setting.data" --no-children --sort dso,symbol --stdio -g none > "$run/self.txt" 2>/dev/null || true
    perf report -i "$run/perf-$setting.data" --children --sort symbol --stdio -g none > "$run/incl.txt" 2>/dev/null || true
    { echo "# self time"; grep -v '^#' "$run/self.txt" | grep -v '^$' | head -40 || true
      echo "# inclusive time"; grep -v '^#' "$run/incl.txt" | grep -v '^$' | head -80 || true
    } > "$out/perf-$setting.txt"
    cp "$run/incl.txt" "$out/perf-$setting-inclusive-all.txt"
  done
fi
grep -q 'RESULT done=1' "$out/guest.log" || { tail -40 "$out/guest.log" >&2; exit 1; }
cp "$run/cpu.tsv" "$out/marks.tsv"
"$keel" stat --config "$run/on.toml" > "$out/stat-on.txt" 2>&1 || true
"$keel" stat --config "$run/off.toml" > "$out/stat-off.txt" 2>&1 || true

# cpu.tsv: "begin|end SETTING ROUND PROCS PHASE [RATE] CPU_ON CPU_OFF CLOCK".
python3 - "$run/cpu.tsv" "$out/results.tsv" "$files" > "$out/table.md" <<'PY'
import statistics, sys
marks, results, files = sys.argv[1], sys.argv[2], int(sys.argv[3])
begin, rows = {}, []
for line in open(marks):
    f = line.split()
    if f[0] == "begin":
        begin[tuple(f[1:5])] = f[5:]
        continue
    key, rate, after = tuple(f[1:5]), float(f[5]), f[6:]
    before = begin.pop(key)
    which = 0 if key[0] == "on" else 1
    cpu = float(after[which]) - float(before[which])
    wall = float(after[2]) - float(before[2])
    rows.append((*key, rate, cpu, wall))
with open(results, "w") as out:
    for r in rows:
        out.write("\t".join(str(x) for x in r) + "\n")
def cell(values, fmt):
    m = statistics.median(values)
    return f"{fmt(m)} ({fmt(min(values))}–{fmt(max(values))})"
phases = ["create", "evict", "stat", "remove", "write", "wremove"]
print("| processes | phase | on, files/s | off, files/s | on/off | on, server CPU µs/file | off, server CPU µs/file |")
print("|---|---|---|---|---|---|---|")
for procs in sorted({r[2] for r in rows}, key=int):
    for phase in phases:
        sel = {s: [r for r in rows if r[0] == s and r[2] == procs and r[3] == phase] for s in ("on", "off")}
        if not sel["on"] or not sel["off"]:
            continue
        rate = {s: [r[4] for r in sel[s]] for s in sel}
        cpu = {s: [r[5] * 1e6 / files for r in sel[s]] for s in sel}
        ratio = statistics.median(rate["on"]) / statistics.median(rate["off"])
        print(f"| {procs} | {phase} | {cell(rate['on'], lambda v: f'{v:.0f}')} | {cell(rate['off'], lambda v: f'{v:.0f}')} "
              f"| {ratio:.2f}x | {cell(cpu['on'], lambda v: f'{v:.0f}')} | {cell(cpu['off'], lambda v: f'{v:.0f}')} |")
print(f"\nMedians (ranges) over the rounds; {files} files a phase; server CPU = utime + stime of its process over the phase, per file.")
PY
cat "$out/table.md"
echo "delegcost.sh: results in $out"
