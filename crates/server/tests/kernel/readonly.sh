# Guest side of kernel_client::readonly_export. Root (not squashed) on a
# `ro` export: reading works and every change fails: EROFS from the server,
# or EACCES from the client's ACCESS check when opening a file for writing.

# stdin is the guest's console, a tty: nothing may stop to ask (rm does).
exec </dev/null

result() { echo "RESULT $1=$2"; }
# Runs a command, reporting its exit code and what it printed.
try() {
  key=$1; shift
  out=$("$@" 2>&1)
  result "rc_$key" $?
  result "err_$key" "$(echo "$out" | head -1)"
}

result read "$(cat readme.txt)"
echo 3 > /proc/sys/vm/drop_caches
result inner_md5 "$(md5sum < sub/inner.bin | cut -d' ' -f1)"
result listing "$(ls | tr '\n' ,)"

try create sh -c 'echo x > new.txt'
try touch_new touch newfile
try mkdir mkdir newdir
try rm rm readme.txt
try rm_r rm -r sub
try rmdir rmdir empty
try mv mv readme.txt moved.txt
try symlink ln -s readme.txt sl
try link ln readme.txt hl
try touch_existing touch readme.txt
try chmod chmod 600 readme.txt
try chown chown 1:1 readme.txt
try truncate truncate -s 0 readme.txt
try append sh -c 'echo x >> readme.txt'
try overwrite sh -c 'echo x > readme.txt'
try mknod mkfifo fifo

# Nothing changed, as this client sees it.
result after_read "$(cat readme.txt)"
result after_listing "$(ls | tr '\n' ,)"
result done 1
