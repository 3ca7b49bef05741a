# Guest side of kernel_client::more_files_than_descriptors: the server may
# open at most 1024 descriptors; this client makes 2,500 files and comes back
# to the first ones. Every step is bounded: a server out of descriptors
# answers NFS3ERR_JUKEBOX and the client retries every 5 s, forever (and only
# SIGKILL ends a wait on a hard mount).

# stdin is the guest's console, a tty: nothing may stop to ask (rm does).
exec </dev/null

result() { echo "RESULT $1=$2"; }
T=$(date +%s)

mkdir lots
timeout -s KILL 90 sh -c 'cd lots && seq -w 1 2500 | sed "s/^/f-/" | xargs touch'
result create_rc $?
echo "TIME create_2500 $(($(date +%s) - T))s"
# The rest cannot go better once creating hung.
if [ "$(timeout -s KILL 30 ls lots | wc -l)" = 2500 ]; then
  result count 2500
  # Back to the first files, long since pushed out of any cache of open files.
  first=$(seq -w 1 2500 | head -200 | sed 's/^/f-/')
  timeout -s KILL 30 sh -c "for f in $(echo $first); do echo \$f > lots/\$f || exit 1; done"
  result write_rc $?
  sync; echo 3 > /proc/sys/vm/drop_caches
  result first200_md5 "$(cd lots && timeout -s KILL 30 cat $first | md5sum | cut -d' ' -f1)"
fi
echo "TIME total $(($(date +%s) - T))s"
result done 1
