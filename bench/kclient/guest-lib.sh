# Shared by the guest sides of the kernel-client benchmarks (bench/krb5.sh,
# bench/nfs4.sh): copied into the guest's /opt with --file and sourced.
result() { echo "RESULT $1=$2"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# MiB/s of a dd run, from its last line ("... bytes ... copied, S s, ...").
rate() { sed -n '$s/^\([0-9]*\) bytes.* copied, \([0-9.]*\) s.*/\1 \2/p' | awk '{printf "%.1f", $1 / 1048576 / $2}'; }

# seq_write_read LABEL ROUND FILE MIB: a 1 MiB sequential write of MIB MiB
# (conv=fsync), then its read after the caches are dropped; MiB/s rows.
seq_write_read() {
  local label=$1 round=$2 file=$3 mib=$4 w r
  rm -f "$file"
  drop_caches
  w=$(dd if=/dev/zero of="$file" bs=1M count="$mib" conv=fsync 2>&1 | rate)
  result row "$label $round write $w"
  drop_caches
  r=$(dd if="$file" of=/dev/null bs=1M 2>&1 | rate)
  result row "$label $round read $r"
}

# rand4k LABEL ROUND FILE N [PROCS]: N 4 KiB O_DIRECT reads of FILE at
# random offsets, one in flight per process, from PROCS processes (default
# 1) of N/PROCS reads each (perl: fio is not in the guest's image); an
# IOPS row.
rand4k() {
  local label=$1 round=$2 file=$3 procs=${5:-1} start pids="" p
  local each=$(( $4 / procs ))
  start=$(date +%s%N)
  for p in $(seq "$procs"); do
    perl -e '
      use Fcntl;
      my ($file, $n) = @ARGV;
      sysopen(my $fh, $file, O_RDONLY | O_DIRECT) or die "$file: $!";
      my $blocks = int((-s $file) / 4096); my $buf;
      for (1 .. $n) {
        sysseek($fh, int(rand($blocks)) * 4096, 0) or die "seek: $!";
        sysread($fh, $buf, 4096) == 4096 or die "read: $!";
      }' "$file" "$each" &
    pids="$pids $!"
  done
  for p in $pids; do wait "$p" || return 1; done
  result row "$label $round rand4k $(( each * procs * 1000000000 / ($(date +%s%N) - start) ))"
}
