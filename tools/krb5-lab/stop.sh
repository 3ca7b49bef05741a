#!/bin/bash
# Stops the KDC that setup.sh DIR started (its pid is in DIR/kdc.pid), waiting
# at most 10 s for it to exit. DIR stays: remove it when done.
set -uo pipefail
dir=${1:?usage: stop.sh DIR}
pidfile=$dir/kdc.pid
[ -s "$pidfile" ] || { echo "krb5-lab/stop.sh: no KDC running from $dir (no $pidfile)" >&2; exit 0; }
pid=$(cat "$pidfile")
# Only our krb5kdc: a stale pid file must not kill whatever reused the pid.
if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = krb5kdc ] && grep -qa -- "$dir/kdc.pid" "/proc/$pid/cmdline" 2>/dev/null; then
  kill -TERM "$pid"
  for _ in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid"
    echo "krb5-lab/stop.sh: krb5kdc $pid ignored SIGTERM for 10 s; killed" >&2
  fi
fi
rm -f "$pidfile"
