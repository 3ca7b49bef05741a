# Guest side of nfs4_restart.rs, in the export mounted with NFSv4.2: holds a
# lock on `data` and writes with fsync before and after the server's restart
# (v4lock holdwrite; the test restarts the server between guest-holds and
# host-go). Polling for host-go (lookupcache=none) keeps calls going, so the
# client finds the restart at once and reclaims.
exec </dev/null
result() { echo "RESULT $1=$2"; }
result mount_vers "$(sed -n 's|^[^ ]* /mnt/nfs nfs4 .*[ ,]vers=\([0-9.]*\).*|\1|p' /proc/mounts)"
/opt/v4lock holdwrite data guest-holds host-go
result done 1
