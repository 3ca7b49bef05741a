# Guest side of bench/nfs4.sh: /mnt/nfs is the export mounted over NFSv3;
# the same export is mounted at /mnt/v4.1 and /mnt/v4.2.
# /opt/bench.env: rounds, mib, reads, files, port, export.
exec </dev/null
. /opt/bench.env
result() { echo "RESULT $1=$2"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
for v in 4.1 4.2; do
  mkdir -p /mnt/v$v
  timeout 120 mount -t nfs -o "vers=$v,proto=tcp,port=$port" "10.0.2.2:$export" /mnt/v$v || { result mount_$v failed; exit 1; }
done
dir() { [ "$1" = 3 ] && echo /mnt/nfs || echo "/mnt/v$1"; }
# MiB/s of a dd run, from its last line ("... bytes ... copied, S s, ...").
rate() { sed -n '$s/^\([0-9]*\) bytes.* copied, \([0-9.]*\) s.*/\1 \2/p' | awk '{printf "%.1f", $1 / 1048576 / $2}'; }
# Files per second of one metadata phase over FILES files in DIR, in one
# process, as mdtest does with one task: create (creat(), as mdtest; O_EXCL
# would make NFSv3's an exclusive CREATE plus a SETATTR), then close; stat
# after the caches are dropped; remove. perl-base has no Time::HiRes: the
# shell times each phase.
meta() { # phase dir
  local start=$(date +%s%N)
  perl -MFcntl -e '
    my ($phase, $dir, $n) = @ARGV;
    for my $i (1 .. $n) {
      my $f = "$dir/f$i";
      if ($phase eq "create") { sysopen(my $fh, $f, O_WRONLY | O_CREAT | O_TRUNC, 0644) or die "$f: $!"; close $fh }
      elsif ($phase eq "stat") { my @s = stat $f or die "$f: $!" }
      else { unlink $f or die "$f: $!" }
    }' "$1" "$2" "$files" || return 1
  echo $(( files * 1000000000 / ($(date +%s%N) - start) ))
}
for round in $(seq "$rounds"); do
  # Every round starts with the next version.
  k=$(( (round - 1) % 3 ))
  order=$(echo 3 4.1 4.2 3 4.1 4.2 | cut -d' ' -f$((k + 1))-$((k + 3)))
  for v in $order; do
    d=$(dir "$v")
    rm -rf "$d/meta-$v"; mkdir "$d/meta-$v"
    for phase in create stat remove; do
      [ "$phase" = stat ] && drop_caches
      r=$(meta "$phase" "$d/meta-$v") || { result error "$v $phase"; exit 1; }
      result row "$v $round $phase $r"
    done
    rmdir "$d/meta-$v"
    rm -f "$d/seq-$v"
    drop_caches
    w=$(dd if=/dev/zero of="$d/seq-$v" bs=1M count="$mib" conv=fsync 2>&1 | rate)
    result row "$v $round write $w"
    drop_caches
    r=$(dd if="$d/seq-$v" of=/dev/null bs=1M 2>&1 | rate)
    result row "$v $round read $r"
    start=$(date +%s%N)
    perl -e '
      use Fcntl;
      my ($file, $n) = @ARGV;
      sysopen(my $fh, $file, O_RDONLY | O_DIRECT) or die "$file: $!";
      my $blocks = int((-s $file) / 4096); my $buf;
      for (1 .. $n) {
        sysseek($fh, int(rand($blocks)) * 4096, 0) or die "seek: $!";
        sysread($fh, $buf, 4096) == 4096 or die "read: $!";
      }' "$d/seq-$v" "$reads"
    iops=$(( reads * 1000000000 / ($(date +%s%N) - start) ))
    result row "$v $round rand4k $iops"
  done
done
for v in 4.1 4.2; do umount /mnt/v$v; done
result done 1
