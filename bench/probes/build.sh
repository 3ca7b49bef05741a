#!/usr/bin/env bash
# Builds the probes (nfsping, nfsmeta, nfslock, nfsrm and nfsread against
# Debian's libnfs, pingpong) into target/probes, installing libnfs-dev if needed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/../../target/probes
mkdir -p "$out"
if [ ! -e /usr/include/nfsc/libnfs.h ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libnfs-dev >/dev/null
fi
cc -O2 -Wall -o "$out/nfsping" "$here/nfsping.c" -lnfs
cc -O2 -Wall -o "$out/nfsmeta" "$here/nfsmeta.c" -lnfs
cc -O2 -Wall -o "$out/nfsrm" "$here/nfsrm.c" -lnfs
cc -O2 -Wall -o "$out/nfslock" "$here/nfslock.c" -lnfs
cc -O2 -Wall -o "$out/nfsread" "$here/nfsread.c" -lnfs
cc -O2 -Wall -pthread -o "$out/pingpong" "$here/pingpong.c"
echo "$out/nfsping $out/nfsmeta $out/pingpong $out/nfslock $out/nfsrm $out/nfsread"
