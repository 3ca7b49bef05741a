#!/bin/bash
cd /work/main
for r in 1 2; do
for mode in off on; do
  conf=()
  [ $mode = on ] && conf=(--keel-conf 'nfs4_write_delegations = true')
  flock /work/notes/cpu.lock bash bench/nfs4.sh --keel /work/keel-bench-release --rounds 4 --files 500 "${conf[@]}" --out /work/notes/wdeleg/$mode-$r > /work/notes/wdeleg/$mode-$r.log 2>&1
  echo "$mode-$r rc=$?" >> /work/notes/wdeleg/status
done
done
