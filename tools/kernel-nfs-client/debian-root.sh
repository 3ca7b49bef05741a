#!/bin/bash
# The root file system of run.sh's Debian guest (`run.sh --guest debian`): a
# minimal Debian with the client side of NFS with Kerberos (nfs-common's
# rpc.gssd and nfsidmap, krb5-user's kinit/klist/kvno, keyutils for the
# kernel's key requests), as an ext4 image the guest boots from read-write
# with qemu's snapshot=on (every boot starts from the same image; nothing it
# writes reaches the cache).
#
# usage: debian-root.sh    prints the image's path once it exists
#   KEEL_CI_SUITE   Debian suite (this machine's, else bookworm)
#   KEEL_CI_MIRROR  the mirror debootstrap uses (http://deb.debian.org/debian)
#   KEEL_CI_CACHE   where the root and its image are cached (/var/cache/keel-ci),
#                   shared with scripts/test-package.sh (whose root is another one)
# The first run debootstraps (a few minutes, needs the mirror); later runs
# only print the path. A root is complete once its .keel-ci-complete names
# the packages it was made with: an interrupted build, or one from an older
# package list, is redone, never used.
set -euo pipefail

fail() { echo "kernel-nfs-client/debian-root.sh: $*" >&2; exit 3; }
[ "$(id -u)" -eq 0 ] || fail "run as root (debootstrap)"

suite=${KEEL_CI_SUITE:-$(. /etc/os-release 2>/dev/null; echo "${VERSION_CODENAME:-}")}
suite=${suite:-bookworm}
mirror=${KEEL_CI_MIRROR:-http://deb.debian.org/debian}
cache=${KEEL_CI_CACHE:-/var/cache/keel-ci}
root=$cache/$suite-krb5-client-root
image=$cache/$suite-krb5-client.ext4
# What the guest runs: rpc.gssd, nfsidmap and request-key's configuration
# (nfs-common), kinit/klist/kvno (krb5-user), request-key (keyutils), and
# /etc/protocols and /etc/services (netbase: umount.nfs fails without them).
packages=nfs-common,krb5-user,keyutils,netbase

need=""
command -v debootstrap >/dev/null || need="$need debootstrap"
command -v mkfs.ext4 >/dev/null || need="$need e2fsprogs"
if [ -n "$need" ]; then
  echo "kernel-nfs-client: installing$need" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need) >/dev/null 2>&1 \
    || fail "could not install$need (apt-get install$need)"
fi

mkdir -p "$cache"
exec 9>"$cache/.krb5-client.lock"
flock -w 1800 9 || fail "another build of $root held $cache/.krb5-client.lock for 30 minutes"
if [ "$(cat "$root/.keel-ci-complete" 2>/dev/null)" != "$packages" ]; then
  echo "kernel-nfs-client: first run: debootstrap $suite ($packages) from $mirror into $root (a few minutes)" >&2
  rm -rf "$root.tmp" "$image"
  if ! timeout 1800 debootstrap --variant=minbase --include=$packages \
    "$suite" "$root.tmp" "$mirror" >"$cache/krb5-client-debootstrap.log" 2>&1; then
    tail -n 20 "$cache/krb5-client-debootstrap.log" >&2
    fail "debootstrap of $suite from $mirror failed (set KEEL_CI_MIRROR to a reachable mirror); log in $cache/krb5-client-debootstrap.log"
  fi
  # Only what a throwaway guest needs: no apt lists, docs or man pages.
  rm -rf "$root.tmp"/var/lib/apt/lists/* "$root.tmp"/var/cache/apt/*.bin \
    "$root.tmp"/var/cache/apt/archives/*.deb "$root.tmp"/usr/share/doc/* "$root.tmp"/usr/share/man/*
  rm -rf "$root"
  mv "$root.tmp" "$root"
  echo "$packages" >"$root/.keel-ci-complete"
fi
if [ ! -e "$image" ]; then
  # Room for what guest scripts write beside the root (the writes go to
  # qemu's temporary overlay, not to this file).
  mb=$(( $(du -sm "$root" | cut -f1) + 256 ))
  mkfs.ext4 -q -F -L keel-krb5-root -d "$root" "$image.tmp" "${mb}M" \
    || fail "mkfs.ext4 -d $root $image.tmp failed"
  mv "$image.tmp" "$image"
fi
echo "$image"
