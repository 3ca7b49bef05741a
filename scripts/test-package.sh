#!/usr/bin/env bash
# The Debian packages on a fresh Debian system, under a real systemd: builds
# keel and keel-tools .debs (scripts/package.sh), boots a debootstrapped
# Debian root with systemd-nspawn (this machine's PID 1 need not be
# systemd), installs them with apt, and checks that
#   man -w keel, keel.toml ...    find the package's man pages (keel(8), a
#                                 page per command, keel.toml(5))
#   systemctl enable --now keel   starts it (Type=notify: returns once ready)
#   keel status                   reports it healthy, under the unit's
#                                 capability bounding set and seccomp filter
#   systemctl reload keel         applies a new export, and fails changing
#                                 nothing when the file is bad
#   keel bench                    (keel-tools, run through keel) creates,
#                                 writes, reads and removes files through the
#                                 hardened server
#   systemctl stop keel           stops it cleanly (exit 0, "stopped" logged)
#
# The Debian root is made once with debootstrap (about 2 minutes, and it
# needs deb.debian.org or KEEL_CI_MIRROR) and cached in
# /var/cache/keel-ci/SUITE-root; every run boots a throwaway copy of it
# (--ephemeral), so reruns take well under a minute. Nothing is skipped: a
# step that cannot run fails the test and says why.
#
# Usage: scripts/test-package.sh [--profile release|dev]   (as root)
#   KEEL_CI_SUITE   the Debian suite to test on (this machine's, else bookworm)
#   KEEL_CI_MIRROR  the mirror debootstrap uses (http://deb.debian.org/debian)
#   KEEL_CI_CACHE   where the root is cached (/var/cache/keel-ci)
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
  echo "scripts/test-package.sh: FAILED: $*" >&2
  exit 1
}
step() { echo "== $*"; }

profile=release
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="$2"; shift 2 ;;
    *) fail "unknown argument $1 (see the comment at the top)" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || fail "run as root: it boots a container"
for tool in debootstrap systemd-nspawn nsenter flock timeout man; do
  command -v "$tool" >/dev/null || fail "$tool is missing (apt install debootstrap systemd-container util-linux man-db)"
done

suite=${KEEL_CI_SUITE:-$(. /etc/os-release 2>/dev/null; echo "${VERSION_CODENAME:-}")}
suite=${suite:-bookworm}
mirror=${KEEL_CI_MIRROR:-http://deb.debian.org/debian}
cache=${KEEL_CI_CACHE:-/var/cache/keel-ci}
root="$cache/$suite-root"
work=$(mktemp -d "${TMPDIR:-/tmp}/keel-test-package.XXXXXX")
nspawn_pid=
leader=

cleanup() {
  local status=$?
  if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
    if [ -n "$leader" ]; then
      timeout 20 nsenter -t "$leader" -a -r -w -- systemctl poweroff >/dev/null 2>&1 || true
    fi
    for _ in $(seq 60); do
      kill -0 "$nspawn_pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -TERM "$nspawn_pid" 2>/dev/null || true
    wait "$nspawn_pid" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ] && [ -s "$work/console.log" ]; then
    echo "--- the container's console (last 40 lines) ---" >&2
    tail -n 40 "$work/console.log" >&2
  fi
  rm -rf "$work"
}
trap cleanup EXIT

step "packages ($profile build)"
scripts/package.sh --profile "$profile" --out "$work/debs" >"$work/package.log" 2>&1 ||
  { cat "$work/package.log" >&2; fail "scripts/package.sh failed"; }
ls "$work"/debs/keel_*.deb "$work"/debs/keel-tools_*.deb >/dev/null || fail "no .deb files were built"

# man finds the pages where the package puts them (the container has no
# man-db: its minimal root lacks it, and it has no network to fetch it).
dpkg-deb -x "$work"/debs/keel_*.deb "$work/keel-root"
for page in keel keel.toml keel-exports-reload; do
  found=$(MANPATH="$work/keel-root/usr/share/man" man -w "$page" 2>&1) ||
    fail "man -w $page finds no page in the keel package: $found"
  echo "   man -w $page: ${found#"$work/keel-root"}"
done

step "a Debian $suite root (cached in $root)"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
# The container has no network (--private-network), so the root holds the
# packages' dependencies beforehand: keel links MIT's GSS-API library. The
# marker records the list, and a root made with another one is made again.
root_packages=systemd,systemd-sysv,dbus,libgssapi-krb5-2
if [ "$(cat "$root/.keel-ci-complete" 2>/dev/null)" != "$root_packages" ]; then
  echo "   first run (or new packages): debootstrap $suite from $mirror (about 2 minutes)"
  rm -rf "$root.tmp"
  if ! timeout 1200 debootstrap --variant=minbase --include="$root_packages" \
    "$suite" "$root.tmp" "$mirror" >"$cache/debootstrap.log" 2>&1; then
    tail -n 20 "$cache/debootstrap.log" >&2
    fail "debootstrap of $suite from $mirror failed (it needs that mirror: set KEEL_CI_MIRROR); log in $cache/debootstrap.log"
  fi
  rm -rf "$root"
  mv "$root.tmp" "$root"
  echo "$root_packages" > "$root/.keel-ci-complete"
fi
flock -u 9

step "boot it (systemd-nspawn --ephemeral, private network)"
# --keep-unit --register=no: no D-Bus or machined needed on this host.
# nspawn's own seccomp filter refuses open_by_handle_at to the container
# (a container escape where the container does not own the file system),
# and its capabilities lack CAP_SYS_RESOURCE: a storage node's systemd
# has both, so the container gets them for the unit to use.
setsid systemd-nspawn -q -D "$root" --ephemeral --boot --register=no --keep-unit --private-network \
  --system-call-filter=open_by_handle_at --capability=CAP_SYS_RESOURCE \
  -M "keelci-$$" --bind-ro="$work/debs:/debs" >"$work/console.log" 2>&1 </dev/null &
nspawn_pid=$!
for _ in $(seq 120); do
  leader=$(pgrep -P "$nspawn_pid" -x systemd || true)
  [ -n "$leader" ] && break
  kill -0 "$nspawn_pid" 2>/dev/null || fail "systemd-nspawn exited at once"
  sleep 0.5
done
[ -n "$leader" ] || fail "the container's systemd did not start within 60 s"

# Runs a command in the container (its namespaces, root and directory).
ct() { timeout 120 nsenter -t "$leader" -a -r -w -- "$@"; }

state=
for _ in $(seq 120); do
  state=$(ct systemctl is-system-running 2>/dev/null || true)
  case "$state" in running | degraded) break ;; esac
  sleep 0.5
done
case "$state" in
  running | degraded) echo "   the container's systemd is $state" ;;
  *) fail "the container did not finish booting within 60 s (systemctl is-system-running: $state)" ;;
esac

step "apt install ./keel_*.deb ./keel-tools_*.deb"
# No network in the container: the dependencies (libc6, libgcc-s1) are in
# every Debian system; recommends (fonts for keel report's PNGs) are not
# fetched.
ct sh -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends /debs/keel_*.deb /debs/keel-tools_*.deb' \
  >"$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt could not install the packages"; }
ct test -f /etc/keel/keel.toml || fail "no /etc/keel/keel.toml"
ct test -f /usr/lib/systemd/system/keel.service || fail "no keel.service"
for page in man8/keel.8 man8/keel-serve.8 man8/keel-exports-reload.8 man5/keel.toml.5 man1/keel-bench-seq.1; do
  ct test -f "/usr/share/man/$page.gz" || fail "no man page /usr/share/man/$page.gz"
done
[ "$(ct stat -c %a /var/lib/keel)" = 700 ] || fail "/var/lib/keel is not mode 0700"

step "systemctl enable --now keel"
ct systemctl enable --now keel >"$work/enable.log" 2>&1 ||
  { cat "$work/enable.log" >&2; ct journalctl -u keel --no-pager -n 30 >&2 || true; fail "the unit did not start"; }
[ "$(ct systemctl is-active keel)" = active ] || fail "keel is not active after enable --now"
[ "$(ct systemctl is-enabled keel)" = enabled ] || fail "keel is not enabled"
ct keel status >"$work/status.txt" 2>&1 || { cat "$work/status.txt" >&2; fail "keel status says unhealthy"; }
grep -q ": healthy" "$work/status.txt" || { cat "$work/status.txt" >&2; fail "keel status does not say healthy"; }
echo "   $(head -n1 "$work/status.txt")"

# The hardening is in force on the running process: its bounding set is
# the unit's capabilities (as far as the container has them), no new
# privileges, a seccomp filter.
pid=$(ct systemctl show -p MainPID --value keel)
caps=$(ct grep CapBnd "/proc/$pid/status" | awk '{print $2}')
container_caps=$(ct grep CapBnd /proc/1/status | awk '{print $2}')
# CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID SETGID SETUID
# NET_BIND_SERVICE SYS_RESOURCE MKNOD: bits 0 1 2 3 4 6 7 10 24 27.
unit_caps=$((0x090004df))
expected=$(printf '%016x' $((unit_caps & 0x$container_caps)))
[ "$caps" = "$expected" ] ||
  fail "keel's capability bounding set is $caps, not the unit's $expected (container: $container_caps)"
[ "$(ct grep NoNewPrivs "/proc/$pid/status" | awk '{print $2}')" = 1 ] || fail "NoNewPrivileges is not in force"
[ "$(ct grep '^Seccomp:' "/proc/$pid/status" | awk '{print $2}')" = 2 ] || fail "no seccomp filter on keel"

step "systemctl reload keel: a new export"
ct mkdir -p /srv/keel-ci
ct sh -c 'sed -i "/^export = \[\]$/d" /etc/keel/keel.toml && cat >>/etc/keel/keel.toml <<EOF

[[export]]
path = "/srv/keel-ci"
id = 1
access = "rw"
squash = "no_root_squash"

[[export.clients]]
host = "127.0.0.1"
EOF'
ct systemctl reload keel >"$work/reload.log" 2>&1 ||
  { cat "$work/reload.log" >&2; ct journalctl -u keel --no-pager -n 30 >&2 || true; fail "systemctl reload keel failed"; }
ct keel exports | grep /srv/keel-ci >/dev/null || fail "the reload did not add /srv/keel-ci (keel exports: $(ct keel exports))"

step "systemctl reload keel: a bad file is refused and changes nothing"
ct cp /etc/keel/keel.toml /root/keel.toml.good
ct sh -c 'echo "[[export]]
path = \"/srv/missing\"
id = 2
acess = \"rw\"" >>/etc/keel/keel.toml'
if ct systemctl reload keel >"$work/bad-reload.log" 2>&1; then
  fail "systemctl reload keel succeeded with a bad configuration"
fi
[ "$(ct systemctl is-active keel)" = active ] || fail "keel stopped after a refused reload"
ct keel exports | grep /srv/keel-ci >/dev/null || fail "a refused reload changed the exports"
ct journalctl -u keel --no-pager | grep "export reload refused, nothing changed" >/dev/null ||
  fail "the journal does not say why the reload was refused"
ct cp /root/keel.toml.good /etc/keel/keel.toml

step "keel bench through the hardened server"
ct keel bench meta --server 127.0.0.1:2049 --export /srv/keel-ci -n 40 --clients 2 --quiet \
  --output /root/meta.json >"$work/bench.log" 2>&1 || { cat "$work/bench.log" >&2; fail "keel bench meta failed"; }
ct keel bench seq --server 127.0.0.1:2049 --export /srv/keel-ci --total 8M --clients 2 --quiet \
  --output /root/seq.json >"$work/bench.log" 2>&1 || { cat "$work/bench.log" >&2; fail "keel bench seq failed"; }
ct keel stat >"$work/stat.txt" 2>&1 || { cat "$work/stat.txt" >&2; fail "keel stat failed"; }
grep -Eq '^ *write +[1-9]' "$work/stat.txt" || { cat "$work/stat.txt" >&2; fail "keel stat counted no WRITE"; }
ct keel status >/dev/null || fail "keel status unhealthy after the load"

step "systemctl stop keel"
ct systemctl stop keel || fail "systemctl stop keel failed"
[ "$(ct systemctl is-active keel || true)" = inactive ] || fail "keel is still active after stop"
[ "$(ct systemctl show -p Result --value keel)" = success ] ||
  fail "the stop was not clean: Result=$(ct systemctl show -p Result --value keel)"
[ "$(ct systemctl show -p ExecMainStatus --value keel)" = 0 ] || fail "keel exited non-zero on stop"
ct journalctl -u keel --no-pager | grep -Eq 'INFO +stopped$' || fail "the journal lacks keel's 'stopped'"

echo "scripts/test-package.sh: ok ($suite, systemd $(ct systemctl --version | head -n1 | awk '{print $2}'))"
