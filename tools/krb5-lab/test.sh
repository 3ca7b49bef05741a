#!/bin/bash
# Proves the Kerberos test lab without an NFS server: a throwaway KDC
# (setup.sh) on this host's loopback, and the kernel client's Debian guest
# (run.sh --guest debian --no-mount) pointed at it through qemu's user
# networking (the guest reaches this host's 127.0.0.1 as 10.0.2.2). In the
# guest:
#   rpc.gssd runs and holds the kernel's gssd pipe (what sec=krb5 mounts need)
#   alice gets a ticket with her password, klist shows it, and she gets a
#     service ticket for the NFS server (kvno nfs/server.keel.test)
#   bob gets his with his keytab; a wrong password gets none
#   root, with no ticket of its own, gets the client's machine ticket from
#     /etc/krb5.keytab (host/client.keel.test, which rpc.gssd uses for root)
#   carol's ticket (lifetime 5 s) has expired 8 s later and gets no service ticket
# and the KDC's log shows those requests came to it. Then, booted again to
# mount with --opts sec=krb5i from gss-probe-server.py (MOUNT as a krb5-only
# export answers it; it refuses every context), the kernel's upcall reaches
# rpc.gssd, which gets a service ticket for nfs/server.keel.test with the
# machine keytab and sends the probe an RPCSEC_GSS_INIT carrying it: the whole
# client side of a krb5 mount, up to the server's answer.
#
# usage: tools/krb5-lab/test.sh    (as root; the first run debootstraps the
#   guest's root, about a minute with a near mirror: see debian-root.sh's
#   KEEL_CI_SUITE, KEEL_CI_MIRROR and KEEL_CI_CACHE)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
run=$here/../kernel-nfs-client/run.sh
fail() { echo "krb5-lab/test.sh: FAILED: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "run as root (the guest's root is built with debootstrap)"

work=$(mktemp -d "${TMPDIR:-/tmp}/krb5-lab-test.XXXXXX")
probe_pid=""
cleanup() {
  local status=$?
  "$here/stop.sh" "$work/lab" >/dev/null 2>&1 || true
  if [ -n "$probe_pid" ]; then kill "$probe_pid" 2>/dev/null || true; wait "$probe_pid" 2>/dev/null || true; fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

# Free ports, so that parallel runs and a system KDC on 88 do not collide.
free_port() { # FIRST: the first port from FIRST on that nothing listens on
  local p
  for p in $(seq "$1" $(($1 + 99))); do
    ss -Htuln "sport = :$p" | grep -q . || { echo "$p"; return 0; }
  done
  fail "no free port in $1-$(($1 + 99))"
}
port=$(free_port 20088)
probe_port=$(free_port 20491)

# Built first, so that the guest's boot below is timed alone.
"$here/../kernel-nfs-client/debian-root.sh" >/dev/null || fail "the Debian guest's root could not be built"

"$here/setup.sh" "$work/lab" --port "$port" --short-life 5 || fail "setup.sh failed"

cat >"$work/guest.sh" <<'EOF'
ok() { echo "OK: $*"; }
bad() { echo "NOT OK: $*"; exit 1; }
gssd=$(grep -lx rpc.gssd /proc/[0-9]*/comm | head -n1 | cut -d/ -f3)
[ -n "$gssd" ] || bad "rpc.gssd is not running"
ls -l /proc/$gssd/fd | grep -q 'rpc_pipefs/gssd/' || bad "rpc.gssd does not hold the kernel's gssd pipe"
ok "rpc.gssd (pid $gssd) holds $(ls -l /proc/$gssd/fd | grep -o '/run/rpc_pipefs/gssd/[^ ]*' | head -n1)"

kinit-as alice || bad "alice's kinit with her password failed"
as-user alice klist | grep -q '^Default principal: alice@KEEL.TEST$' || { as-user alice klist; bad "klist does not show alice's ticket"; }
ok "alice has a ticket (klist as alice: $(as-user alice klist | sed -n 's/^Ticket cache: //p'))"
kvno=$(as-user alice kvno nfs/server.keel.test) || bad "alice got no service ticket for nfs/server.keel.test"
ok "alice: $kvno"

as-user bob kinit -k -t /etc/krb5-lab/bob.keytab bob || bad "bob's kinit with his keytab failed"
as-user bob kvno nfs/server.keel.test >/dev/null || bad "bob got no service ticket"
ok "bob has a ticket from his keytab and a service ticket"
if as-user bob sh -c 'echo not-the-password | kinit bob@KEEL.TEST' >/dev/null 2>&1; then bad "a wrong password got bob a ticket"; fi
ok "a wrong password gets no ticket"

klist -s 2>/dev/null && bad "root has a ticket before asking for one"
kinit -k -c /tmp/root.ccache host/client.keel.test || bad "no machine ticket from /etc/krb5.keytab"
KRB5CCNAME=/tmp/root.ccache kvno nfs/server.keel.test >/dev/null || bad "the machine ticket gets no service ticket"
ok "root: machine ticket for host/client.keel.test from /etc/krb5.keytab, and a service ticket with it"

kinit-as carol || bad "carol's kinit failed"
as-user carol klist -s || bad "carol's fresh ticket is not valid"
sleep 8
as-user carol klist -s && bad "carol's 5 s ticket is still valid 8 s later"
err=$(as-user carol kvno nfs/server.keel.test 2>&1) && bad "carol's expired ticket got a service ticket"
ok "carol's ticket expired: kvno says: $err"
EOF

start=$(date +%s)
out=$("$run" --guest debian --krb5 "$work/lab/guest" --hostname client.keel.test \
  --server-name server.keel.test --no-mount --timeout 180 "$work/guest.sh" 2>&1) && rc=0 || rc=$?
took=$(( $(date +%s) - start ))
echo "$out"
[ "$rc" = 0 ] || fail "the guest script failed (exit $rc)"
[ "$(grep -c '^OK: ' <<<"$out")" = 7 ] || fail "the guest passed $(grep -c '^OK: ' <<<"$out") of 7 checks"
# The requests reached this lab's KDC (its log), not some other.
grep -q "AS_REQ.*alice@KEEL.TEST for krbtgt/KEEL.TEST@KEEL.TEST" "$work/lab/kdc.log" || fail "kdc.log has no AS_REQ from alice"
grep -q "TGS_REQ.*alice@KEEL.TEST for nfs/server.keel.test@KEEL.TEST" "$work/lab/kdc.log" || fail "kdc.log has no TGS_REQ for alice's service ticket"
grep -q "TGS_REQ.*host/client.keel.test@KEEL.TEST for nfs/server.keel.test@KEEL.TEST" "$work/lab/kdc.log" || fail "kdc.log has no TGS_REQ with the machine ticket"
echo "krb5-lab/test.sh: Kerberos in the guest ok (it booted and ran its checks in ${took}s)"

python3 "$here/gss-probe-server.py" 127.0.0.1 "$probe_port" "$work/probe.log" 200 &
probe_pid=$!
for _ in $(seq 50); do grep -q LISTENING "$work/probe.log" 2>/dev/null && break; sleep 0.1; done
grep -q LISTENING "$work/probe.log" 2>/dev/null || fail "gss-probe-server.py did not start on 127.0.0.1:$probe_port"
echo 'echo "the mount from a server that refuses every context succeeded"; exit 1' >"$work/mount.sh"
start=$(date +%s)
out=$("$run" --guest debian --krb5 "$work/lab/guest" --hostname client.keel.test --server-name server.keel.test \
  --port "$probe_port" --export /krb5 --opts sec=krb5i,retrans=1,timeo=50 --timeout 180 "$work/mount.sh" 2>&1) && rc=0 || rc=$?
took=$(( $(date +%s) - start ))
echo "$out"
cat "$work/probe.log"
[ "$rc" = 125 ] || fail "the sec=krb5i mount from the probe ended with exit $rc, not 125 (mount failed)"
grep -q "Success getting keytab entry for 'nfs/client.keel.test@KEEL.TEST'" <<<"$out" ||
  fail "rpc.gssd did not take the machine's key from /etc/krb5.keytab"
grep -q "^GSS prog=100003 vers=3 proc=0 gss_proc=1 .*names=nfs,server.keel.test$" "$work/probe.log" ||
  fail "the probe got no RPCSEC_GSS_INIT with a ticket for nfs/server.keel.test"
grep -q "TGS_REQ.*nfs/client.keel.test@KEEL.TEST for nfs/server.keel.test@KEEL.TEST" "$work/lab/kdc.log" ||
  fail "kdc.log has no TGS_REQ from rpc.gssd's machine credentials"
echo "krb5-lab/test.sh: ok (a sec=krb5i mount reached RPCSEC_GSS_INIT; that boot took ${took}s)"
