# Sourced by heldout.sh and seqread.sh: fio with its libnfs engine.
#
#   fio_build    sets $fio; builds it first if missing or if the patch changed
#
# fio is built from Debian's source package with --enable-libnfs (Debian's
# binary package leaves the engine out) and bench/fio-nfs-getevents.patch,
# once, into /var/cache/keel-bench. The patch: fio 3.33's nfs engine
# ignores getevents' `min`, so a job ended with calls in flight, and
# libnfs's umount then hung or crashed on their replies. Rebuilt when the
# patch changes.
fio_build() {
  local here cache patch_sum src
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  cache=/var/cache/keel-bench
  fio=$cache/fio/fio
  patch_sum=$(sha256sum "$here/fio-nfs-getevents.patch" | cut -d' ' -f1)
  if [ ! -x "$fio" ] || [ "$(cat "$cache/fio/patch.sha256" 2>/dev/null)" != "$patch_sum" ]; then
    echo "== building fio with the libnfs engine (once)"
    grep -q '^Types:.*deb-src' /etc/apt/sources.list.d/debian.sources 2>/dev/null ||
      sed -i 's/^Types: deb$/Types: deb deb-src/' /etc/apt/sources.list.d/debian.sources
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libnfs-dev dpkg-dev patch zlib1g-dev libaio-dev >/dev/null
    rm -rf "$cache/src" && mkdir -p "$cache/src"
    (cd "$cache/src" && apt-get source -qq fio >/dev/null 2>&1)
    src=$(find "$cache/src" -maxdepth 1 -type d -name 'fio-*' | head -1)
    patch -s -d "$src" -p1 < "$here/fio-nfs-getevents.patch"
    (cd "$src" && ./configure --enable-libnfs >/dev/null && make -s -j"$(nproc)" fio >/dev/null)
    mkdir -p "$cache/fio" && cp "$src/fio" "$fio" && echo "$patch_sum" > "$cache/fio/patch.sha256"
  fi
  "$fio" --enghelp=nfs >/dev/null 2>&1 || { echo "$0: $fio has no nfs engine" >&2; return 1; }
}
