# Guest side of kernel_client::write_back_cache_with_the_kernel_client: the
# kernel client's writes on an export whose cache is in write-back mode (the
# host's cutoff sends every stream through the mirrored log). Each file is
# built twice, over NFS and in the guest's /tmp; the digests of the NFS copy
# read back with cold caches, and of the local one, are printed for the host
# to compare with the file system once it has flushed the cache.

# stdin is the guest's console, a tty: nothing may stop to ask.
exec </dev/null

result() { echo "RESULT $1=$2"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
md5() { md5sum < "$1" | cut -d' ' -f1; }

# 24 MiB in 1 MiB writes, made stable by fsync (WRITE, COMMIT).
dd if=/dev/urandom of=/tmp/big bs=1M count=24 2>/dev/null
dd if=/tmp/big of=big bs=1M conv=fsync 2>/tmp/err
result big_rc "$?"

# 64 overwrites of 4 KiB at scattered places in it, each fsync'ed.
failed=0; i=0
while [ $i -lt 64 ]; do
  at=$(( (i * 2654435761) % 6144 ))
  dd if=/dev/urandom of=/tmp/blk bs=4k count=1 2>/dev/null
  dd if=/tmp/blk of=big bs=4k seek=$at count=1 conv=notrunc,fsync 2>>/tmp/err || failed=$((failed + 1))
  dd if=/tmp/blk of=/tmp/big bs=4k seek=$at count=1 conv=notrunc 2>/dev/null
  i=$((i + 1))
done
result overwrites_failed "$failed"

# Appends of an odd size, each fsync'ed.
dd if=/dev/urandom of=/tmp/odd bs=5001 count=10 2>/dev/null
i=0; failed=0
while [ $i -lt 10 ]; do
  dd if=/tmp/odd of=odd bs=5001 skip=$i seek=$i count=1 conv=notrunc,fsync 2>>/tmp/err || failed=$((failed + 1))
  i=$((i + 1))
done
result appends_failed "$failed"

# Cut down while its data is still in the log, then extended: the tail
# reads as zeros, not as the data cut away.
dd if=/dev/urandom of=/tmp/cut bs=1M count=8 2>/dev/null
dd if=/tmp/cut of=cut bs=1M conv=fsync 2>>/tmp/err
truncate -s 1000000 cut && truncate -s 3000000 cut
result truncate_rc "$?"
truncate -s 1000000 /tmp/cut && truncate -s 3000000 /tmp/cut

# Small files: created, half removed, one renamed.
mkdir small
i=0
while [ $i -lt 200 ]; do
  head -c 3000 /tmp/big > small/f$i
  i=$((i + 1))
done
i=0
while [ $i -lt 100 ]; do rm small/f$i; i=$((i + 2)); done
mv small/f1 small/renamed
result small_count "$(ls small | wc -l)"

drop_caches
for f in big odd cut; do
  result ${f}_md5 "$(md5 $f)"
  result ${f}_expected_md5 "$(md5 /tmp/$f)"
  result ${f}_size "$(stat -c %s $f)"
done
result small_md5 "$(md5 small/renamed)"
result small_expected_md5 "$(head -c 3000 /tmp/big | md5sum | cut -d' ' -f1)"
result errors "$(grep -v -e 'records in' -e 'records out' /tmp/err | tr '\n' ' ')"
result done 1
