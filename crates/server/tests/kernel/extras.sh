# Guest side of kernel_client::fsync_df_rename_over_and_readdir, mounted with
# nordirplus so directory listings use plain READDIR.

# stdin is the guest's console, a tty: nothing may stop to ask (rm does).
exec </dev/null

result() { echo "RESULT $1=$2"; }

# dd conv=fsync: written, fsync'ed (COMMIT), then checked on the host.
dd if=/dev/urandom of=/tmp/src bs=64k count=128 2>/dev/null
result src_md5 "$(md5sum < /tmp/src | cut -d' ' -f1)"
out=$(dd if=/tmp/src of=fsynced bs=64k conv=fsync 2>&1)
result dd_rc $?
result dd_fsync "$(echo "$out" | tail -1)"

# df: the client's view of FSSTAT, in KiB.
df -k . | tail -1 | tr -s ' ' > /tmp/df
result df "$(cat /tmp/df)"
result namelen "$(stat -f -c %l .)"

# mv over an existing file replaces the name, not the old file's data (a hard
# link keeps that); also across directories.
echo old > target
ln target keep
echo new > src
mv src target
mkdir d1 d2
echo from-d1 > d1/moving
echo in-d2 > d2/moving
mv d1/moving d2/moving
echo 3 > /proc/sys/vm/drop_caches
result target "$(cat target)"
result keep "$(cat keep)"
result keep_nlink "$(stat -c %h keep)"
result src_gone "$([ ! -e src ] && echo yes)"
result d2_moving "$(cat d2/moving)"
result d1_left "$(ls -A d1 | wc -l)"

# A directory the host filled, listed with READDIR only.
result hostdir_count "$(ls hostdir | wc -l)"
result hostdir_md5 "$(find hostdir -mindepth 1 | sed 's|^hostdir/||' | sort | md5sum | cut -d' ' -f1)"
result done 1
