#!/bin/sh
# A read delegation recalled by a change of the file's attributes or name
# on the server (tests/nfs4_deleg.rs): open and read f and h (the server
# offers a read delegation on each), say "ready", and look until the host's
# chmod of f and rename of h show (for a minute at most): while the client
# holds a delegation it trusts the attributes and the name it cached.
exec 3<f
exec 4<h
echo "RESULT first_mode=$(stat -c %a f)"
echo "RESULT first_h=$(cat h)"
echo ready > ready
i=0
while { [ "$(stat -c %a f)" != 600 ] || [ -e h ]; } && [ $i -lt 300 ]; do
  sleep 0.2
  i=$((i + 1))
done
echo "RESULT mode=$(stat -c %a f)"
if [ -e h ]; then echo "RESULT old_name=present"; else echo "RESULT old_name=gone"; fi
echo "RESULT new_name=$(cat h2)"
exec 3<&- 4<&-
echo "RESULT done=1"
