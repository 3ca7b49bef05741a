#!/bin/sh
# Two processes lock under a write delegation (tests/nfs4_deleg.rs): open
# w read-write, creating it (the server offers a write delegation), write
# to it; two processes each take a POSIX lock on a range of their own,
# which the client keeps locally under the delegation (one lock owner
# each); say "ready" and hold them until the host says "go". Meanwhile a
# local process on the host opens w, which recalls the delegation: the
# client sends both owners' locks, and the host's lock on either range
# must be refused.
exec 3<>w
printf 'guest data' >&3
/opt/v4lock hold posix w held1 go 0 4 &
/opt/v4lock hold posix w held2 go 4 4 &
i=0
while { [ ! -e held1 ] || [ ! -e held2 ]; } && [ $i -lt 300 ]; do
  sleep 0.2
  i=$((i + 1))
done
echo ready > ready
wait
exec 3>&-
echo "RESULT done=1"
