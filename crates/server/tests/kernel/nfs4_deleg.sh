#!/bin/sh
# A read delegation recalled by an NFSv3 write (tests/nfs4_deleg.rs):
# open and read f (the server offers a read delegation), say "ready", wait
# until the host's NFSv3 client has written f and then "go" into signal,
# and read f again: it must be the host's data, not what the delegation
# let this client cache.
exec 3<f
echo "RESULT first=$(cat f)"
echo ready > ready
i=0
while [ "$(cat signal)" != go ] && [ $i -lt 900 ]; do
  sleep 0.2
  i=$((i + 1))
done
echo "RESULT signal=$(cat signal)"
echo "RESULT after=$(cat f)"
echo "RESULT after_fd=$(cat <&3)"
exec 3<&-
echo "RESULT done=1"
