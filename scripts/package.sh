#!/usr/bin/env bash
# Builds Keel's Debian packages from this repository with dpkg-deb (no
# debhelper, no source package):
#
#   TARGET/debian/keel_VERSION_ARCH.deb        the server: /usr/bin/keel, the
#       systemd unit, /etc/keel/keel.toml (exports nothing until edited),
#       man pages (keel(8) and a page per command, keel.toml(5)), the
#       annotated example configuration, the Grafana dashboard
#   TARGET/debian/keel-tools_VERSION_ARCH.deb  keel bench|verify|report for
#       client nodes: /usr/bin/keel-tools and its man pages
#
# Usage: scripts/package.sh [--profile release|dev] [--out DIR]
#   --profile  the cargo profile to build (release; CI packages the dev
#              build it already has, to test the packaging and the unit)
#   --out      where the .deb files go (TARGET/debian)
# TARGET is cargo's target directory: CARGO_TARGET_DIR, or what cargo's
# configuration says, else ./target (cargo metadata tells).
# Needs: cargo, dpkg-deb and dpkg-shlibdeps (dpkg-dev), strip (binutils).
set -euo pipefail
cd "$(dirname "$0")/.."

target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target" ] || { echo "scripts/package.sh: cargo metadata names no target directory" >&2; exit 1; }
profile=release
out=$target/debian
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "scripts/package.sh: unknown argument $1 (see the comment at the top)" >&2; exit 2 ;;
  esac
done
case "$profile" in
  release) bindir=$target/release ;;
  dev) bindir=$target/debug ;;
  *) echo "scripts/package.sh: --profile is release or dev, not $profile" >&2; exit 2 ;;
esac
for tool in dpkg-deb dpkg-shlibdeps strip gzip; do
  command -v "$tool" >/dev/null || {
    echo "scripts/package.sh: $tool is missing (apt install dpkg-dev binutils)" >&2
    exit 1
  }
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$version" ] || { echo "scripts/package.sh: no version in Cargo.toml's [workspace.package]" >&2; exit 1; }
arch=$(dpkg --print-architecture)
maintainer=${DEB_MAINTAINER:-"Keel developers <keel@invalid>"}

cargo build --locked --profile "$profile" -p keel -p keel-tools

stage=$(mktemp -d "${TMPDIR:-/tmp}/keel-package.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$out"

# The Depends: line dpkg-shlibdeps derives from the binary's libraries
# (it wants a debian/control to read, so it runs in a scratch tree).
shlibs() {
  local dir="$stage/shlibs"
  mkdir -p "$dir/debian"
  printf 'Source: keel\n\nPackage: keel\nArchitecture: any\n' >"$dir/debian/control"
  (cd "$dir" && dpkg-shlibdeps -O "$1" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
}

# install_bin SRC DEST: stripped of debug sections (symbols stay, for
# readable backtraces).
install_bin() {
  install -D -m 0755 "$1" "$2"
  strip --strip-debug "$2"
}

# man_pages BIN ROOT SECTION: the binary writes its own pages (clap_mangen,
# from the same command-line definitions it parses), gzipped as policy
# wants: keel's in section 8 (a server's administration, as nfsd(8)),
# keel-tools' in 1.
man_pages() {
  local dir="$2/usr/share/man/man$3"
  mkdir -p "$dir"
  "$1" manpages "$dir"
  gzip -9n "$dir"/*."$3"
}

doc() {
  install -D -m 0644 contrib/debian/copyright "$1/usr/share/doc/$2/copyright"
}

# control ROOT PACKAGE SECTION DEPENDS EXTRA DESCRIPTION...
control() {
  local root=$1 package=$2 section=$3 depends=$4 extra=$5
  shift 5
  local size
  size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  mkdir -p "$root/DEBIAN"
  {
    echo "Package: $package"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: $maintainer"
    echo "Installed-Size: $size"
    echo "Depends: $depends"
    [ -n "$extra" ] && printf '%s\n' "$extra"
    echo "Section: $section"
    echo "Priority: optional"
    echo "Description: $1"
    shift
    for line in "$@"; do echo " $line"; done
  } >"$root/DEBIAN/control"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) \
    >"$root/DEBIAN/md5sums"
}

build() {
  local root=$1 package=$2
  local deb="$out/${package}_${version}_${arch}.deb"
  dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
  echo "$deb"
}

# --- keel: the server -------------------------------------------------------
k="$stage/keel"
install_bin "$bindir/keel" "$k/usr/bin/keel"
install -D -m 0644 contrib/systemd/keel.service "$k/usr/lib/systemd/system/keel.service"
install -D -m 0644 contrib/debian/keel.toml "$k/etc/keel/keel.toml"
man_pages "$k/usr/bin/keel" "$k" 8
# The configuration file's page, written by hand (as exports(5)).
install -D -m 0644 contrib/man/keel.toml.5 "$k/usr/share/man/man5/keel.toml.5"
gzip -9n "$k/usr/share/man/man5/keel.toml.5"
doc "$k" keel
install -D -m 0644 keel.example.toml "$k/usr/share/doc/keel/examples/keel.example.toml"
for f in README.md docs/admin-protocol.md; do
  install -D -m 0644 "$f" "$k/usr/share/doc/keel/$(basename "$f")"
  gzip -9n "$k/usr/share/doc/keel/$(basename "$f")"
done
install -D -m 0644 contrib/grafana/keel.json "$k/usr/share/keel/grafana/keel.json"
# High availability: the OCF agent where Pacemaker finds ocf:keel:keel.
install -D -m 0755 contrib/ocf/keel "$k/usr/lib/ocf/resource.d/keel/keel"
install -D -m 0644 contrib/ha/keel-ha.example.toml "$k/usr/share/doc/keel/examples/keel-ha.example.toml"
install -d -m 0700 "$k/var/lib/keel"
for script in postinst prerm postrm; do
  install -D -m 0755 "contrib/debian/keel/$script" "$k/DEBIAN/$script"
done
echo /etc/keel/keel.toml >"$k/DEBIAN/conffiles"
control "$k" keel net "$(shlibs "$k/usr/bin/keel")" "Suggests: keel-tools, rpcbind, pacemaker, corosync, crmsh, resource-agents" \
  "NFSv3 server for HPC clusters, in user space" \
  "Keel serves local directories over NFSv3 and MOUNT v3 (TCP) to Linux" \
  "kernel clients and others, as knfsd does, from one program: each call" \
  "runs under the caller's identity, files are opened by handle, and" \
  "exports change without a restart (systemctl reload keel)." \
  "." \
  "This package holds the server, its systemd unit (readiness, reload," \
  "hardened), /etc/keel/keel.toml, and the keel command that asks the" \
  "running server: keel status, keel stat (nfsstat-like statistics)," \
  "keel exports [reload]. Prometheus metrics are served when configured."

# --- keel-tools: for client nodes ------------------------------------------
t="$stage/keel-tools"
install_bin "$bindir/keel-tools" "$t/usr/bin/keel-tools"
man_pages "$t/usr/bin/keel-tools" "$t" 1
doc "$t" keel-tools
control "$t" keel-tools net "$(shlibs "$t/usr/bin/keel-tools")" "Recommends: fonts-dejavu-core" \
  "NFSv3 load generator, data verifier and report (keel bench|verify|report)" \
  "Tools to evaluate NFSv3 servers, speaking the protocol themselves (no" \
  "kernel mount): IOzone-style N-to-N sequential and random I/O," \
  "mdtest metadata rates and IOR from one client or many (mpirun, srun);" \
  "keel verify writes self-describing streams and checks what the server" \
  "acknowledged after a crash or failover; keel report draws the results." \
  "Measures any NFSv3 server." \
  "." \
  "Run as keel-tools bench|verify|report, or as keel bench|verify|report" \
  "where the keel package is installed too."

build "$k" keel
build "$t" keel-tools
