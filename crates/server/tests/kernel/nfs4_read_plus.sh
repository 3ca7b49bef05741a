# Guest side of nfs4::a_client_that_reads_with_read_plus_gets_sparse_files_whole_without_their_holes:
# reads the files the test made on the server (two sparse, one dense) and
# reports their md5 sums and what the client's READ and READ_PLUS calls
# carried (mountstats: ops, then bytes received).
exec </dev/null
result() { echo "RESULT $1=$2"; }
result kernel "$(uname -r)"
result mount_vers "$(sed -n 's|^[^ ]* /mnt/nfs nfs4 .*[ ,]vers=\([0-9.]*\).*|\1|p' /proc/mounts)"
for f in sparse small-holes dense; do
  result "${f}_md5" "$(md5sum < $f | cut -d' ' -f1)"
done
op() { awk -v op="$1:" '$1 == op { print $2 " " $6; exit }' /proc/self/mountstats; }
result read_plus "$(op READ_PLUS)"
result read "$(op READ)"
result done 1
