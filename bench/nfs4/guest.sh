# Guest side of bench/nfs4.sh: /mnt/nfs is the export mounted over NFSv3;
# the same export is mounted at /mnt/v4.1 and /mnt/v4.2.
# /opt/bench.env: rounds, mib, reads, files, procs, port, export.
exec </dev/null
. /opt/bench.env
. /opt/guest-lib.sh
for v in 4.1 4.2; do
  mkdir -p /mnt/v$v
  timeout 120 mount -t nfs -o "vers=$v,proto=tcp,port=$port" "10.0.2.2:$export" /mnt/v$v || { result mount_$v failed; exit 1; }
done
dir() { [ "$1" = 3 ] && echo /mnt/nfs || echo "/mnt/v$1"; }
# Files per second of one metadata phase over FILES files in DIR, as
# mdtest does: create (creat(), as mdtest; O_EXCL would make NFSv3's an
# exclusive CREATE plus a SETATTR), then close; stat after the caches are
# dropped; remove. From PROCS processes (default 1), each in a directory
# of its own (p1, p2, ...) with FILES/PROCS files; one process works in
# DIR itself. Each process times its own loop, as mdtest does, and the
# phase's rate is the sum of theirs: timed from the shell, a phase also
# held perl's start (read back from the guest's disk after the caches
# are dropped), 0.26-0.52 s in a captured run against 0.34-0.45 s for the
# 500 stats on the wire (bench/results/nfs4/wire-stat.md), and its spread
# hid the versions' (meta_phase, in bench/kclient/guest-lib.sh).
procs=${procs:-1}
meta() { # phase dir
  local j dirs=$2
  [ "$procs" = 1 ] || { dirs=""; for j in $(seq "$procs"); do dirs="$dirs $2/p$j"; done; }
  meta_phase "$1" $(( files / procs )) $dirs
}
for round in $(seq "$rounds"); do
  # Every round starts with the next version.
  k=$(( (round - 1) % 3 ))
  order=$(echo 3 4.1 4.2 3 4.1 4.2 | cut -d' ' -f$((k + 1))-$((k + 3)))
  for v in $order; do
    d=$(dir "$v")
    rm -rf "$d/meta-$v"; mkdir "$d/meta-$v"
    [ "$procs" = 1 ] || for j in $(seq "$procs"); do mkdir "$d/meta-$v/p$j"; done
    for phase in create stat remove; do
      [ "$phase" = stat ] && drop_caches
      r=$(meta "$phase" "$d/meta-$v") || { result error "$v $phase"; exit 1; }
      result row "$v $round $phase $r"
    done
    rm -rf "$d/meta-$v"
    seq_write_read "$v" "$round" "$d/seq-$v" "$mib"
    rand4k "$v" "$round" "$d/seq-$v" "$reads" "$procs"
  done
done
for v in 4.1 4.2; do umount /mnt/v$v; done
result done 1
