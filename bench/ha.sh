#!/usr/bin/env bash
# The failure table of Dell's NSS7.0-HA paper (docs/benchmarks.md,
# "Reference systems"), with repeated trials: the cases of
# crates/server/tests/ha_failover.rs (two Pacemaker/Corosync nodes in
# namespaces, Keel configured by `keel ha init`, keel verify and a FILE_SYNC
# prober through each fault), each run TRIALS times in one lab (the service
# returns to A between trials), for p50 and p99 of the failover time and of
# the client-visible interruption. Every trial also checks that no
# acknowledged byte was lost.
#
#   sudo bench/ha.sh [--trials N] [--token-ms MS] [--consensus-ms MS]
#                    [--fencing-delay S] [--heartbeat2] [--cases "server_crash ..."]
#                    [--vers 3|4.1] [--debug] [--out DIR]
#
# --consensus-ms: the plan's consensus_ms (default: unset, Corosync's 1.2
# times the token). --fencing-delay: the plan's
# priority_fencing_delay_seconds (default: unset, keel ha init's none;
# 1 makes the serving node win a fencing race). --heartbeat2: each node's heartbeat2, a second Corosync link
# on the public network.
#
# The nodes run the release build of keel, as users do (KEEL_BIN; the lab
# itself is the debug test binary); --debug runs the debug build there
# instead, as every run before 2026-11-28 did. Each trial prints its
# timeline on B (Corosync, Pacemaker, the fencer, each start, Keel's
# tickles, the kernel client's reconnection, the end of the grace period).
#
# --vers 4.1: the kernel client mounts with NFSv4.1 and writes from a
# process that holds a POSIX lock on its file through each fault; a
# second client (NLM) must be denied that lock before, during and after
# the grace period (KEEL_HA_KERNEL_VERS; default 3).
#
# Cases: server_crash server_hang heartbeat_link_loss public_link_loss
# primary_fence_device_failure primary_fence_device_hung
# primary_fence_device_slow storage_path_loss (heartbeat_switch_loss
# runs once: it is not repaired). Not run unless named: fencing_race and
# fencing_race_at_switch_repair (who is fenced when both nodes fence;
# asserted with --fencing-delay 1, reported without). Needs root and the Debian packages
# scripts/test.sh installs; one lab at a time, on a quiet machine.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
trials=5; token_ms=1000; consensus_ms=""; fencing_delay=""; heartbeat2=""; vers=3; profile=release
cases="server_crash server_hang heartbeat_link_loss public_link_loss primary_fence_device_failure"
cases="$cases primary_fence_device_hung primary_fence_device_slow storage_path_loss"
out=$repo/bench/results/ha-$(date -u +%Y%m%dT%H%M%SZ)
while [ $# -gt 0 ]; do
  case "$1" in
    --trials) trials=$2; shift 2;;
    --token-ms) token_ms=$2; shift 2;;
    --consensus-ms) consensus_ms=$2; shift 2;;
    --fencing-delay) fencing_delay=$2; shift 2;;
    --heartbeat2) heartbeat2=1; shift;;
    --cases) cases=$2; shift 2;;
    --vers) vers=$2; shift 2;;
    --debug) profile=debug; shift;;
    --out) out=$2; shift 2;;
    *) echo "usage: $0 [--trials N] [--token-ms MS] [--consensus-ms MS] [--fencing-delay S] [--heartbeat2] [--cases \"...\"] [--vers 3|4.1] [--debug] [--out DIR]" >&2; exit 2;;
  esac
done
mkdir -p "$out"
cd "$repo"
# keel verify is keel-tools'.
cargo build -p keel --tests --quiet && cargo build -p keel-tools --quiet
if [ "$profile" = release ]; then
  # keel finds keel verify (keel-tools) beside itself.
  cargo build --release -p keel -p keel-tools --quiet
  export KEEL_BIN=${CARGO_TARGET_DIR:-$repo/target}/release/keel
fi
{
  echo "# bench/ha.sh --trials $trials --token-ms $token_ms${consensus_ms:+ --consensus-ms $consensus_ms}${fencing_delay:+ --fencing-delay $fencing_delay}${heartbeat2:+ --heartbeat2} --vers $vers ($profile keel on the nodes), $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD)"
  echo "# $(nproc) cores, $(uname -r)"
} >"$out/summary.txt"
for c in $cases; do
  echo "== $c" >&2
  env KEEL_HA_TRIALS=$trials KEEL_HA_TOKEN_MS=$token_ms ${consensus_ms:+KEEL_HA_CONSENSUS_MS=$consensus_ms} ${fencing_delay:+KEEL_HA_PRIORITY_FENCING_DELAY=$fencing_delay} ${heartbeat2:+KEEL_HA_HEARTBEAT2=1} KEEL_HA_KERNEL_VERS=$vers \
    cargo test -p keel --test ha_failover --quiet -- --exact "$c" --nocapture --test-threads 1 \
    >"$out/$c.log" 2>&1 || { echo "$c failed: see $out/$c.log" >&2; exit 1; }
  # Every case prints one (heartbeat_switch_loss's says 1 trial).
  summary=$(grep -h '^ha_failover summary' "$out/$c.log") \
    || { echo "$c passed but printed no summary line: see $out/$c.log" >&2; exit 1; }
  echo "$summary" | tee -a "$out/summary.txt"
done
echo "results in $out" >&2
