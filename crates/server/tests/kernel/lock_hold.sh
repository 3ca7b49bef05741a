# Holds a lock across the server's restarts (kernel_locking.rs): the
# marker file tells the test the lock is taken.
/opt/klock hold data 0 100 HOLD_SECONDS &
sleep 2
echo held > marker
sync
wait
echo RESULT done=1
