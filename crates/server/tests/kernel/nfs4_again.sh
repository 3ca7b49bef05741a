# Guest side of nfs4::the_kernel_client_mounts_v4_2_by_default_and_works,
# second and third boots: the export mounted with vers=4.1 or vers=4.2
# finds what the first boot wrote, and writes a file of its own; then
# creates and removes 64 files in a directory of its own (the test counts
# the server's LOOKUP and ACCESS operations meanwhile).
exec </dev/null
result() { echo "RESULT $1=$2"; }
result mount_vers "$(sed -n 's|^[^ ]* /mnt/nfs nfs4 .*[ ,]vers=\([0-9.]*\).*|\1|p' /proc/mounts)"
result big_md5 "$(md5sum < big | cut -d' ' -f1)"
v=$(sed -n 's|^[^ ]* /mnt/nfs nfs4 .*[ ,]vers=\([0-9.]*\).*|\1|p' /proc/mounts)
echo "written over $v" > "by-$v" && result wrote ok
mkdir "meta-$v" && cd "meta-$v" || exit 1
i=0; while [ $i -lt 64 ]; do : > "f$i" || exit 1; i=$((i+1)); done
i=0; while [ $i -lt 64 ]; do rm "f$i" || exit 1; i=$((i+1)); done
cd .. && rmdir "meta-$v" && result meta ok
result done 1
