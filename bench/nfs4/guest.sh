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
# DIR itself. perl-base has no Time::HiRes: the shell times each phase.
procs=${procs:-1}
meta() { # phase dir
  local start=$(date +%s%N) each=$(( files / procs )) pids="" j d
  for j in $(seq "$procs"); do
    d=$2; [ "$procs" = 1 ] || d=$2/p$j
    perl -MFcntl -e '
      my ($phase, $dir, $n) = @ARGV;
      for my $i (1 .. $n) {
        my $f = "$dir/f$i";
        if ($phase eq "create") { sysopen(my $fh, $f, O_WRONLY | O_CREAT | O_TRUNC, 0644) or die "$f: $!"; close $fh }
        elsif ($phase eq "stat") { my @s = stat $f or die "$f: $!" }
        else { unlink $f or die "$f: $!" }
      }' "$1" "$d" "$each" &
    pids="$pids $!"
  done
  for j in $pids; do wait "$j" || return 1; done
  echo $(( each * procs * 1000000000 / ($(date +%s%N) - start) ))
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
