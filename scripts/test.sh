#!/usr/bin/env bash
# Keel's whole test suite, on a fresh Debian machine: installs the Debian
# packages the build needs (MIT Kerberos headers and libclang for the
# GSS-API binding) and the tests use (real NFS clients, an MIT KDC, qemu and a kernel for the Linux
# client, NFS-Ganesha as a peer server, XFS tools, rpcbind, a font for the
# report's PNGs, debootstrap and systemd-nspawn for the package test,
# Corosync, Pacemaker, crmsh and the resource agents for the HA lab), then
# checks formatting and lints, runs every test, and installs the Debian
# packages in a booted Debian container (scripts/test-package.sh; its
# first run debootstraps a root from deb.debian.org, about 2 minutes, and
# caches it in /var/cache/keel-ci), and proves the Kerberos test lab
# (tools/krb5-lab/test.sh: a throwaway KDC, the kernel client's Debian guest
# with rpc.gssd; its first run debootstraps that guest's root, about a
# minute, cached there too). Needs root: the server opens files by
# handle and switches identities, and the tests make loop devices, XFS file
# systems, network namespaces and containers.
#
# Run it as yourself, with Rust from rustup: it runs itself again as root
# through sudo, with your toolchain (cargo from your PATH, your RUSTUP_HOME
# and CARGO_HOME), and gives you back what it made in your directories.
# `sudo scripts/test.sh` works too (sudo's PATH has no cargo: it is found
# in the invoking user's ~/.cargo/bin). As root (CI), it runs as it is.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$self")/.."

if [ "$(id -u)" -ne 0 ]; then
  cargo=$(command -v cargo) ||
    { echo "scripts/test.sh: no cargo on your PATH: install Rust with rustup (https://rustup.rs)" >&2; exit 1; }
  command -v sudo >/dev/null ||
    { echo "scripts/test.sh: it needs root: run it as root, or install sudo (apt install sudo)" >&2; exit 1; }
  echo "scripts/test.sh: running as root through sudo"
  exec sudo env PATH="$(dirname "$cargo"):$PATH" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" \
    CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" ${CARGO_TARGET_DIR:+CARGO_TARGET_DIR="$CARGO_TARGET_DIR"} "$self" "$@"
fi

# Under sudo: the invoking user's toolchain, and their files back at the end.
if [ -n "${SUDO_USER:-}" ] && [ "${SUDO_USER}" != root ]; then
  home=$(getent passwd "$SUDO_USER" | cut -d: -f6)
  export CARGO_HOME="${CARGO_HOME:-$home/.cargo}" RUSTUP_HOME="${RUSTUP_HOME:-$home/.rustup}"
  # The user's rustup first (sudo's PATH has none, or an older system one).
  if [ -x "$CARGO_HOME/bin/cargo" ]; then export PATH="$CARGO_HOME/bin:$PATH"; fi
  target=${CARGO_TARGET_DIR:-target}
  mkdir -p "$target"
  # cargo as root writes into the user's target directory, CARGO_HOME and
  # RUSTUP_HOME: give them back, or the user's next build fails on root's
  # files.
  give_back() {
    find "$target" "$CARGO_HOME" "$RUSTUP_HOME" -xdev -user 0 -exec chown -h "$SUDO_UID:$SUDO_GID" {} + 2>/dev/null || true
  }
  trap give_back EXIT
fi
command -v cargo >/dev/null ||
  { echo "scripts/test.sh: no cargo: install Rust with rustup (https://rustup.rs)" >&2; exit 1; }

# package:a command or file that proves it is there
wanted=(
  libnfs-utils:nfs-cp
  xfsprogs:mkfs.xfs
  rpcbind:rpcinfo
  nfs-ganesha:ganesha.nfsd
  nfs-ganesha-vfs:/usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so
  qemu-system-x86:qemu-system-x86_64
  busybox-static:/bin/busybox
  cpio:cpio
  # tools/kernel-nfs-client --kernel trixie fetches and unpacks a second kernel.
  curl:curl
  xz-utils:xz
  kmod:depmod
  iproute2:ss
  util-linux:setpriv
  mount:losetup
  fonts-dejavu-core:/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
  python3-prometheus-client:/usr/lib/python3/dist-packages/prometheus_client
  debootstrap:debootstrap
  systemd-container:systemd-nspawn
  krb5-kdc:krb5kdc
  krb5-user:kinit
  dpkg-dev:dpkg-shlibdeps
  binutils:strip
  corosync:corosync
  pacemaker:pacemakerd
  pacemaker-cli-utils:crm_mon
  crmsh:crm
  resource-agents:/usr/lib/ocf/resource.d/heartbeat/IPaddr2
  libxml2-utils:xmllint
  iputils-ping:ping
  man-db:man
  # Building: libgssapi-sys runs bindgen on MIT's <gssapi.h> (RPCSEC_GSS).
  libkrb5-dev:/usr/include/gssapi/gssapi.h
  pkg-config:pkg-config
  # The Kerberos tests' throwaway realm (crates/server/tests/kerberos).
  krb5-kdc:/usr/sbin/krb5kdc
  krb5-admin-server:/usr/sbin/kadmin.local
)
missing=()
for w in "${wanted[@]}"; do
  command -v "${w#*:}" >/dev/null 2>&1 || [ -e "${w#*:}" ] || missing+=("${w%%:*}")
done
ls /boot/vmlinuz-* >/dev/null 2>&1 || missing+=(linux-image-amd64)
# bindgen loads libclang at build time (its version is Debian's choice).
ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || missing+=(libclang-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "scripts/test.sh: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# The packages from the build the tests used (the packaging and the unit
# are what is tested; scripts/package.sh builds release packages).
scripts/test-package.sh --profile dev
tools/krb5-lab/test.sh
