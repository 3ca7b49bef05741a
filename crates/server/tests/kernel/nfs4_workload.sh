# Guest side of nfs4::the_kernel_client_mounts_v4_2_by_default_and_works:
# mounted with no version option (run.sh --vers auto) at the server's pseudo
# root. /opt/export-path holds the export's path below the pseudo root.
# Prints `RESULT key=value` lines that the host test checks, with the
# export directory itself.
exec </dev/null
result() { echo "RESULT $1=$2"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

result mount_vers "$(sed -n 's|^[^ ]* /mnt/nfs nfs4 .*[ ,]vers=\([0-9.]*\).*|\1|p' /proc/mounts)"
rel=$(cat /opt/export-path)
# The pseudo directory holding the exports: what this client may see of it.
result pseudo_listing "$(ls "/mnt/nfs/${rel%/*}" | tr '\n' ' ')"
cd "/mnt/nfs/$rel" || { result cd_export failed; exit 1; }

result written_md5 "$(dd if=/dev/urandom bs=1M count=8 2>/dev/null | tee big | md5sum | cut -d' ' -f1)"
drop_caches
result read_md5 "$(md5sum < big | cut -d' ' -f1)"

mkdir d && result mkdir ok
echo moving > d/a && mv d/a d/b && [ ! -e d/a ] && result renamed "$(cat d/b)"
echo gone > d/c && rm d/c && [ ! -e d/c ] && result removed ok
ln -s some/target sl && result readlink "$(readlink sl)"
echo abcdef > t && truncate -s 3 t && drop_caches && result truncated "$(cat t)"
chmod 640 t && drop_caches && result mode "$(stat -c %a t)"
# ls -l: one line per entry (big, d, sl, t) and the total.
result ls_lines "$(ls -l | wc -l)"
ls -l
result done 1
