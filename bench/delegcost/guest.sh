# Guest side of bench/delegcost.sh (the Debian guest): /mnt/nfs is the
# export over NFSv4.1 from the server with delegations on (the defaults);
# the same export from the server with them off is mounted at /mnt/off.
# /opt/bench.env: rounds, files, procs, port_off, export.
#
# Per round, for 1 process and then PROCS, each setting in turn (the
# first setting alternates by round), in a fresh directory:
#   create  FILES files: creat() then close (as mdtest)
#   evict   the guest's caches dropped (a delegation's holder returns it
#           when the inode goes: DELEGRETURN)
#   stat    each file stat'ed
#   remove  each file removed
#   write   FILES files: open(O_CREAT|O_TRUNC), one 4 KiB write, close
#   wremove each removed, its delegation (if any) still held
# Each phase's rate in files/s (the processes' own rates summed, each
# process timing its own loop, as mdtest), between two "KCPU" lines the
# host reads the server's CPU time at.
exec </dev/null
. /opt/bench.env
. /opt/guest-lib.sh
mkdir -p /mnt/off
timeout 120 mount -t nfs -o "vers=4.1,proto=tcp,port=$port_off" "10.0.2.2:$export" /mnt/off || { result mount_off failed; exit 1; }
dir() { [ "$1" = on ] && echo /mnt/nfs || echo /mnt/off; }
meta() { # phase dir procs
  local j dirs=""
  for j in $(seq "$3"); do dirs="$dirs $2/p$j"; done
  meta_phase "$1" $(( files / $3 )) $dirs
}
now_ns() { date +%s%N; }
# A line for the host's CPU reading, and one more: run.sh shows each
# console line only when the next one comes (its sed looks for the last).
kcpu() { echo "KCPU $*"; echo "-"; }
for round in $(seq "$rounds"); do
  if [ $(( round % 2 )) = 1 ]; then order="on off"; else order="off on"; fi
  for p in 1 "$procs"; do
    for s in $order; do
      d=$(dir "$s")/dc-$s
      rm -rf "$d"; mkdir "$d"
      for j in $(seq "$p"); do mkdir "$d/p$j"; done
      for phase in create evict stat remove write wremove; do
        kcpu begin "$s $round $p $phase"
        if [ "$phase" = evict ]; then
          t0=$(now_ns); drop_caches; t1=$(now_ns)
          r=$(( files * 1000000000 / (t1 - t0) ))
        else
          m=$phase; [ "$m" = wremove ] && m=remove
          r=$(meta "$m" "$d" "$p") || { result error "$s $p $phase"; exit 1; }
        fi
        kcpu end "$s $round $p $phase $r"
        result row "$s $round $p $phase $r"
      done
      rm -rf "$d"
    done
  done
done
umount /mnt/off
result done 1
