# Shared by the guest sides of the kernel-client benchmarks (bench/krb5.sh,
# bench/nfs4.sh, bench/delegcost.sh): copied into the guest's /opt with
# --file and sourced.
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

# meta_phase PHASE EACH DIR...: mdtest's create, stat or remove (or
# write: create, one 4 KiB write, close) of EACH files f1..fEACH in each
# DIR, one process per DIR at once, each timing its own loop as mdtest
# does (timed from the shell, a phase would also hold perl's start, read
# back from the guest's disk after the caches are dropped); prints the
# sum of their rates, files/s. perl-base has no Time::HiRes:
# clock_gettime(CLOCK_MONOTONIC) by its x86-64 syscall number.
meta_phase() {
  local phase=$1 each=$2 pids="" j=0 d rates=/tmp/meta-rates
  shift 2
  rm -f $rates.*
  for d in "$@"; do
    j=$(( j + 1 ))
    perl -MFcntl -e '
      my ($phase, $dir, $n) = @ARGV;
      sub now { my $ts = "\0" x 16; syscall(228, 1, $ts) == 0 or die "clock_gettime: $!";
                my ($s, $ns) = unpack("q q", $ts); $s + $ns / 1e9 }
      my $block = "k" x 4096;
      my $start = now();
      for my $i (1 .. $n) {
        my $f = "$dir/f$i";
        if ($phase eq "create") { sysopen(my $fh, $f, O_WRONLY | O_CREAT | O_TRUNC, 0644) or die "$f: $!"; close $fh }
        elsif ($phase eq "write") {
          sysopen(my $fh, $f, O_WRONLY | O_CREAT | O_TRUNC, 0644) or die "$f: $!";
          syswrite($fh, $block) == 4096 or die "$f: $!";
          close $fh or die "$f: $!";
        }
        elsif ($phase eq "stat") { my @s = stat $f or die "$f: $!" }
        else { unlink $f or die "$f: $!" }
      }
      printf "%d\n", $n / (now() - $start);' "$phase" "$d" "$each" > $rates.$j &
    pids="$pids $!"
  done
  for j in $pids; do wait "$j" || return 1; done
  cat $rates.* | awk '{ t += $1 } END { print t }'
}
