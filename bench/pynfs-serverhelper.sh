#!/usr/bin/env bash
# pynfs's server helper for bench/pynfs.sh (its --serverhelper): pynfs
# runs `pynfs-serverhelper.sh RUNDIR ACTION` (RUNDIR is its
# --serverhelperarg) when a test needs something done on the server.
#
# ACTION reboot (st_reboot.py, the REBT tests): Keel dies as in a crash
# (SIGKILL: nothing flushed, no goodbye to clients) and starts again with
# the same configuration, so on the same state_dir and export; returns
# once the new Keel listens, as pynfs reconnects at once.
#
# RUNDIR/serverhelper.env, written by bench/pynfs.sh, says which Keel:
# keel (the binary), config, port, pidfile (the running Keel's process id,
# rewritten here) and log (its stderr, appended to).
set -euo pipefail
[ $# -eq 2 ] || { echo "pynfs-serverhelper.sh: usage: pynfs-serverhelper.sh RUNDIR ACTION" >&2; exit 2; }
run=$1 action=$2
keel= config= port= pidfile= log=
. "$run/serverhelper.env"

# Whether process $1 is gone (or a zombie its parent has not reaped yet:
# its sockets are closed already).
gone() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
  [ "$state" = Z ]
}

case "$action" in
  reboot)
    old=$(cat "$pidfile")
    kill -KILL "$old" 2>/dev/null || true
    for _ in $(seq 100); do gone "$old" && break; sleep 0.1; done
    gone "$old" || { echo "pynfs-serverhelper.sh: Keel $old survived SIGKILL" >&2; exit 1; }
    echo "=== pynfs-serverhelper.sh: Keel $old killed (SIGKILL) at $(date -u +%FT%TZ), starting again" >> "$log"
    # Its own session, so it outlives this script and pynfs's os.system.
    setsid "$keel" serve --config "$config" >> "$log" 2>&1 < /dev/null &
    echo $! > "$pidfile"
    for _ in $(seq 150); do
      bash -c "echo > /dev/tcp/127.0.0.1/$port" 2>/dev/null && exit 0
      kill -0 "$!" 2>/dev/null || { echo "pynfs-serverhelper.sh: Keel exited on restart (see $log)" >&2; exit 1; }
      sleep 0.2
    done
    echo "pynfs-serverhelper.sh: Keel does not listen on $port 30 s after the restart" >&2
    exit 1;;
  *)
    echo "pynfs-serverhelper.sh: unknown action '$action' (only reboot)" >&2
    exit 2;;
esac
