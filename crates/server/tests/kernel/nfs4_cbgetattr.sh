#!/bin/sh
# CB_GETATTR (tests/nfs4_deleg.rs): create w read-write (the server offers
# a write delegation), write to it through the open descriptor, say
# "ready" and keep it open until the host says "go"; meanwhile another
# client on the host asks for w's size, which the server asks this client
# for with CB_GETATTR.
exec 3<>w
printf 'guest data' >&3
echo ready > ready
i=0
while [ ! -e go ] && [ $i -lt 600 ]; do
  sleep 0.2
  i=$((i + 1))
done
exec 3>&-
echo "RESULT size=$(wc -c < w)"
echo "RESULT done=1"
