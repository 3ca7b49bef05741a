# Guest side of nfs4_lock.rs, in the export mounted with NFSv4.2: locks
# against a process on the server's host (which holds an OFD lock on `lk`
# when this starts), then ALLOCATE, DEALLOCATE, SEEK and COPY. Files named
# *-holds, *-go, *-released and *-checked are the signals between the two sides.
exec </dev/null
result() { echo "RESULT $1=$2"; }
T=/opt/v4lock
wait_for() { i=0; while [ ! -e "$1" ]; do i=$((i+1)); [ $i -gt 180 ] && return 1; sleep 1; done; }
result mount_vers "$(sed -n 's|^[^ ]* /mnt/nfs nfs4 .*[ ,]vers=\([0-9.]*\).*|\1|p' /proc/mounts)"

# 1. The host's lock keeps the guest's fcntl and flock locks out.
$T try posix lk guest_posix_vs_host
$T try flock lk guest_flock_vs_host
: > host-go
# 2. The guest holds the lock (flock, then fcntl) and the host tries.
for how in flock posix; do
  $T hold $how lk guest-holds-$how guest-go-$how
  : > guest-released-$how
  wait_for host-checked-$how || result wait host-checked-$how
done

# 3. NFSv4.2: DEALLOCATE, SEEK, ALLOCATE, COPY.
dd if=/dev/urandom of=f bs=65536 count=16 2>/dev/null && sync
$T punch f 65536 131072
$T seek f 0 hole
$T seek f 65536 data
$T alloc g 0 1048576
result g_size "$(stat -c %s g)"
$T copy f f2
result f_md5 "$(md5sum < f | cut -d' ' -f1)"
result f2_md5 "$(md5sum < f2 | cut -d' ' -f1)"
result done 1
