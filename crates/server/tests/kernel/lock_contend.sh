TAG=TAGVALUE
# Two guests at once (run by kernel_locking.rs): fcntl and flock counters
# incremented under the lock by both, then a lock held by one (TAG a) and
# waited for by the other (TAG b).
/opt/klock incr counter 30 "$TAG" &
/opt/klock fincr fcounter 30 "$TAG" &
wait
if [ "$TAG" = a ]; then
  /opt/klock hold gate 0 10 8
else
  /opt/klock wait gate 0 10
fi
echo RESULT done=1
