#!/bin/bash
# A slow disk for benchmarks and cache tests: an XFS file system on a loop device whose
# I/O is throttled at the block layer (cgroup v1 blkio) for the processes you place in
# its cgroup. Programs stay unmodified: the kernel delays their bios, as a slow drive would.
#
#   slow-disk.sh create NAME SIZE MOUNTPOINT [READ_IOPS WRITE_IOPS READ_MBPS WRITE_MBPS]
#   slow-disk.sh run NAME -- COMMAND...     run COMMAND (and its children) throttled
#   slow-disk.sh add NAME PID               throttle a running process
#   slow-disk.sh destroy NAME
#
# Default limits model the baseline array of the DFC 2013 paper (docs/benchmarks.md,
# "Reference systems") as 64 clients saw it (4× MD1200, 48 NL-SAS drives in RAID 60):
# 9,300 random read IOPS, 1,600 random write IOPS,
# 2,500 MiB/s read, 2,000 MiB/s write. What is throttled: reads that miss the page cache,
# O_DIRECT I/O, and writeback issued by the process itself (fsync, O_SYNC, sync_file_range).
# What is not: background writeback by kernel threads (cgroup v1 cannot attribute it), so
# an async export's buffered writes reach the disk unthrottled until it runs out of memory.
set -euo pipefail
cg=/sys/fs/cgroup/blkio
state=/var/tmp/slow-disk
cmd=${1:?usage: see the header of $0}; name=${2:?name}
mkdir -p "$state"
case "$cmd" in
  create)
    size=${3:?size}; mnt=${4:?mountpoint}
    riops=${5:-9300}; wiops=${6:-1600}; rbps=$(( ${7:-2500} * 1048576 )); wbps=$(( ${8:-2000} * 1048576 ))
    [ -d "$cg" ] || { echo "no cgroup v1 blkio controller at $cg" >&2; exit 1; }
    command -v mkfs.xfs >/dev/null || { apt-get install -y -qq xfsprogs >/dev/null; }
    img=$state/$name.img; truncate -s "$size" "$img"
    dev=$(losetup -f --show "$img"); mkfs.xfs -q -f "$dev"; mkdir -p "$mnt"; mount "$dev" "$mnt"
    mm=$(lsblk -dno MAJ:MIN "$dev" | tr -d ' ')
    mkdir -p "$cg/slow-$name"
    echo "$mm $riops" > "$cg/slow-$name/blkio.throttle.read_iops_device"
    echo "$mm $wiops" > "$cg/slow-$name/blkio.throttle.write_iops_device"
    echo "$mm $rbps" > "$cg/slow-$name/blkio.throttle.read_bps_device"
    echo "$mm $wbps" > "$cg/slow-$name/blkio.throttle.write_bps_device"
    printf '%s %s %s\n' "$dev" "$mnt" "$mm" > "$state/$name"
    echo "slow disk $name: $dev ($mm) on $mnt, read $riops IOPS / ${7:-2500} MiB/s, write $wiops IOPS / ${8:-2000} MiB/s";;
  run)
    shift 2; [ "${1:-}" = "--" ] && shift
    echo $$ > "$cg/slow-$name/cgroup.procs"; exec "$@";;
  add)
    echo "${3:?pid}" > "$cg/slow-$name/cgroup.procs";;
  destroy)
    read -r dev mnt mm < "$state/$name"
    for p in $(cat "$cg/slow-$name/cgroup.procs" 2>/dev/null); do echo "$p" > "$cg/cgroup.procs" 2>/dev/null || true; done
    umount "$mnt" 2>/dev/null || true; losetup -d "$dev" 2>/dev/null || true
    rmdir "$cg/slow-$name" 2>/dev/null || true; rm -f "$state/$name" "$state/$name.img";;
  *) echo "unknown command $cmd" >&2; exit 2;;
esac
