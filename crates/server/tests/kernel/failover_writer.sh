# Writes through an HA failover with the kernel client (tests/ha_failover.rs):
# 64 KiB blocks of a random source, each made stable by fsync (WRITE and
# COMMIT) before the next, cycling over 16 MiB, until the host writes "stop"
# into DIR/control (close-to-open: each open sees the host's change); after
# 150 s it gives up (the host then finds no "stopped"). Reports the longest wait between two completed writes and
# any error; then drops its caches and reads everything back from the server.
# With /opt/v4lock (the NFSv4.1 case), one process writes the same way while
# it holds a POSIX lock on the file from before the fault to the end
# (v4lock lockwrite): the lock must be reclaimed, not lost.
dir=DIR
blocks=256
mkdir -p $dir || { echo "RESULT error=mkdir"; exit 1; }
dd if=/dev/urandom of=/tmp/src bs=64k count=$blocks 2>/dev/null
: > $dir/control || { echo "RESULT error=control"; exit 1; }
if [ -x /opt/v4lock ]; then
  /opt/v4lock lockwrite $dir/data /tmp/src $blocks $dir/control | tee /tmp/lockwrite
  grep -q '^RESULT unlocked=1' /tmp/lockwrite || exit 1
  n=$(sed -n 's/^RESULT writes=//p' /tmp/lockwrite)
else
  # /proc/uptime in centiseconds ("123.45" -> 12345).
  cs() { read t _ < /proc/uptime; echo ${t%.*}${t#*.}; }
  start=$(cs); last=$start; max=0; n=0
  echo "RESULT writing=1"
  while [ $(( $(cs) - start )) -lt 15000 ]; do
    i=$((n % blocks))
    dd if=/tmp/src of=$dir/data bs=64k skip=$i seek=$i count=1 conv=notrunc,fsync 2>/tmp/err \
      || { echo "RESULT error=write block $i: $(cat /tmp/err)"; exit 1; }
    now=$(cs); gap=$((now - last)); [ $gap -gt $max ] && max=$gap; last=$now
    [ $gap -gt 50 ] && echo "slow write at uptime $now cs: $gap cs"
    [ $((n % 500)) = 0 ] && echo "write $n at uptime $now cs"
    n=$((n + 1))
    [ "$(cat $dir/control)" = stop ] && { echo "RESULT stopped=1"; break; }
  done
  echo "RESULT writes=$n"
  echo "RESULT max_gap_cs=$max"
fi
written=$n; [ $written -gt $blocks ] && written=$blocks
sync; echo 3 > /proc/sys/vm/drop_caches
want=$(dd if=/tmp/src bs=64k count=$written 2>/dev/null | md5sum | cut -d' ' -f1)
got=$(dd if=$dir/data bs=64k count=$written 2>/dev/null | md5sum | cut -d' ' -f1)
echo "RESULT bytes=$((written * 65536))"
echo "RESULT md5=$want"
[ "$want" = "$got" ] || { echo "RESULT error=read back $got, wrote $want"; exit 1; }
echo "RESULT done=1"
