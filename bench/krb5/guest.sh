# Guest side of bench/krb5.sh: /mnt/nfs is the export mounted with sec=sys
# (NFSv3); the same export is mounted at /mnt/krb5, /mnt/krb5i, /mnt/krb5p.
# /opt/bench.env: rounds, mib, reads, syncs, port, export.
exec </dev/null
. /opt/bench.env
. /opt/guest-lib.sh
o="vers=3,proto=tcp,port=$port,mountport=$port,mountproto=tcp,nolock"
for f in krb5 krb5i krb5p; do
  mkdir -p /mnt/$f
  timeout 120 mount -t nfs -o "$o,sec=$f" "server.keel.test:$export" /mnt/$f || { result mount_$f failed; exit 1; }
done
dir() { [ "$1" = sys ] && echo /mnt/nfs || echo "/mnt/$1"; }
# The drivers the client's Kerberos crypto runs on (the highest priority wins).
echo "CRYPTO drivers: $(grep '^driver' /proc/crypto | grep -E 'aes|sha1' | sed 's/.*: //' | sort -u | tr '\n' ' ')"
for round in $(seq "$rounds"); do
  # Every round starts with the next flavor.
  k=$(( (round - 1) % 4 ))
  order=$(echo sys krb5 krb5i krb5p sys krb5 krb5i krb5p | cut -d' ' -f$((k + 1))-$((k + 4)))
  for f in $order; do
    d=$(dir "$f")
    seq_write_read "$f" "$round" "$d/seq-$f" "$mib"
    rand4k "$f" "$round" "$d/seq-$f" "$reads"
    # One call in flight: 4 KiB O_DIRECT reads, then 4 KiB O_DIRECT|O_DSYNC
    # writes (each a stable WRITE), at random offsets; microseconds each.
    for op in read4k_us write4k_us; do
      start=$(date +%s%N)
      perl -e '
        use Fcntl;
        my ($file, $n, $op) = @ARGV;
        my $flags = $op eq "read4k_us" ? O_RDONLY : O_WRONLY | O_DSYNC;
        sysopen(my $fh, $file, $flags | O_DIRECT) or die "$file: $!";
        my $blocks = int((-s $file) / 4096); my $buf = "w" x 4096;
        for (1 .. $n) {
          sysseek($fh, int(rand($blocks)) * 4096, 0) or die "seek: $!";
          my $done = $op eq "read4k_us" ? sysread($fh, $buf, 4096) : syswrite($fh, $buf, 4096);
          $done == 4096 or die "$op: $!";
        }' "$d/seq-$f" "$syncs" "$op"
      result row "$f $round $op $(( ($(date +%s%N) - start) / 1000 / syncs ))"
    done
  done
done
for f in krb5 krb5i krb5p; do umount /mnt/$f; done
result done 1
