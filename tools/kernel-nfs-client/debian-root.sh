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
#   KEEL_CI_CACHE   where the image is cached (/var/cache/keel-ci),
#                   shared with scripts/test-package.sh (whose root is another one)
# The first run debootstraps (about a minute from a near mirror); later runs
# only print the path. The image is complete once IMAGE.packages names the
# packages it was made with: an interrupted build, or one from an older
# package list, is redone, never used. Only the image is kept (the
# debootstrapped directory is removed once the image holds it).
set -euo pipefail

fail() { echo "kernel-nfs-client/debian-root.sh: $*" >&2; exit 3; }
[ "$(id -u)" -eq 0 ] || fail "run as root (debootstrap)"

suite=${KEEL_CI_SUITE:-$(. /etc/os-release 2>/dev/null; echo "${VERSION_CODENAME:-}")}
suite=${suite:-bookworm}
mirror=${KEEL_CI_MIRROR:-http://deb.debian.org/debian}
cache=${KEEL_CI_CACHE:-/var/cache/keel-ci}
image=$cache/$suite-krb5-client.ext4
stamp=$image.packages
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
flock -w 1800 9 || fail "another build of $image held $cache/.krb5-client.lock for 30 minutes"
if [ ! -e "$image" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$packages" ]; then
  root=$cache/$suite-krb5-client-root.tmp
  echo "kernel-nfs-client: first run: debootstrap $suite ($packages) from $mirror for $image (about a minute)" >&2
  rm -rf "$root" "$image" "$image.tmp" "$stamp"
  if ! timeout 1800 debootstrap --variant=minbase --include=$packages \
    "$suite" "$root" "$mirror" >"$cache/krb5-client-debootstrap.log" 2>&1; then
    tail -n 20 "$cache/krb5-client-debootstrap.log" >&2
    rm -rf "$root"
    fail "debootstrap of $suite from $mirror failed (set KEEL_CI_MIRROR to a reachable mirror); log in $cache/krb5-client-debootstrap.log"
  fi
  # Only what a throwaway guest needs: no apt lists, docs or man pages.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
    "$root"/var/cache/apt/archives/*.deb "$root"/usr/share/doc/* "$root"/usr/share/man/*
  # Room for what guest scripts write beside the root (the writes go to
  # qemu's temporary overlay, not to this file).
  mb=$(( $(du -sm "$root" | cut -f1) + 256 ))
  mkfs.ext4 -q -F -L keel-krb5-root -d "$root" "$image.tmp" "${mb}M" >&2 \
    || { rm -rf "$root" "$image.tmp"; fail "mkfs.ext4 -d $root $image.tmp failed"; }
  rm -rf "$root"
  mv "$image.tmp" "$image"
  echo "$packages" >"$stamp"
fi
echo "$image"
