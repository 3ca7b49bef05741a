#!/bin/sh
# A write delegation recalled (tests/nfs4_deleg.rs): open w read-write,
# creating it (the server offers a write delegation), write to it, take a
# POSIX lock on it (the client writes back first, then keeps the lock
# locally under the delegation), say "ready" and hold both until the host
# says "go"; meanwhile the host reads w as a local process and as another
# client, and tries a conflicting lock.
exec 3<>w
printf 'guest data' >&3
/opt/v4lock hold posix w held go &
i=0
while [ ! -e held ] && [ $i -lt 300 ]; do
  sleep 0.2
  i=$((i + 1))
done
echo ready > ready
wait
exec 3>&-
echo "RESULT done=1"
