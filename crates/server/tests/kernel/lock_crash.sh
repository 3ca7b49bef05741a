# Takes a lock and crashes (no unlock, no unmount): sysrq reboot, which
# ends the VM (qemu runs with -no-reboot).
/opt/klock hold data 0 100 600 &
sleep 2
echo held > marker
sync
sleep 1
echo RESULT done=1
# Let the serial console drain before the reset cuts it (seen lost once).
sleep 1
echo b > /proc/sysrq-trigger
