# A one-off check of NFSv4.1's sequential read (2026-11-27, at 3c907ce):
# bench/nfs4.sh's run with this as its guest script (in place of
# bench/nfs4/guest.sh). Every round reads each version's 64 MiB file
# (versions in rotating order); then each minor version's file through the
# other's mount; then the client's mountstats. write-then-read.tsv is this
# script (each round writes the file first, as nfs4.sh does);
# read-only.tsv is the same with the round's `seq_write_read` replaced by
# `drop_caches` and the dd read alone (8 rounds).
exec </dev/null
. /opt/bench.env
. /opt/guest-lib.sh
for v in 4.1 4.2; do
  mkdir -p /mnt/v$v
  timeout 120 mount -t nfs -o "vers=$v,proto=tcp,port=$port" "10.0.2.2:$export" /mnt/v$v || { result mount_$v failed; exit 1; }
done
dir() { [ "$1" = 3 ] && echo /mnt/nfs || echo "/mnt/v$1"; }
for v in 3 4.1 4.2; do dd if=/dev/zero of=$(dir $v)/seq-$v bs=1M count=64 conv=fsync 2>/dev/null; done
grep -E "^device|READ:" /proc/self/mountstats > /tmp/ms0
for round in $(seq 1 6); do
  k=$(( (round - 1) % 3 ))
  order=$(echo 3 4.1 4.2 3 4.1 4.2 | cut -d' ' -f$((k + 1))-$((k + 3)))
  for v in $order; do
    seq_write_read "$v" "$round" "$(dir $v)/seq-$v" 64
    grep -A200 "on $(dir $v) " /proc/self/mountstats | grep -m1 "READ:" | sed "s/^/MS $v $round /"
  done
done
# Reads of the v4.1 file through the v4.2 mount and the other way round:
# a file's or a mount's effect.
for round in 1 2 3; do
  drop_caches; result row "4.1file-via-4.2 $round read $(dd if=/mnt/v4.2/seq-4.1 of=/dev/null bs=1M 2>&1 | rate)"
  drop_caches; result row "4.2file-via-4.1 $round read $(dd if=/mnt/v4.1/seq-4.2 of=/dev/null bs=1M 2>&1 | rate)"
done
echo "MOUNTSTATS"
grep -E "^device|READ:|opts:|caps:" /proc/self/mountstats
cat /sys/class/bdi/*/read_ahead_kb 2>/dev/null | tr '\n' ' '; echo
ls /sys/class/bdi/
for b in /sys/class/bdi/*; do echo "$b $(cat $b/read_ahead_kb)"; done
for v in 4.1 4.2; do umount /mnt/v$v; done
result done 1
