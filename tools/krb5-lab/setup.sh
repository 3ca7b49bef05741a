#!/bin/bash
# A throwaway MIT Kerberos KDC for tests: its realm, database, configuration,
# keytabs and log all live in one directory; /etc/krb5.conf, /etc/krb5kdc and
# any KDC this system runs are never read or touched.
#
# usage: setup.sh DIR [options]          creates DIR (which must not exist or be
#                                        empty), starts krb5kdc, waits for it
#        stop.sh DIR                     stops it (next to this script)
#   --realm REALM          (default KEEL.TEST)
#   --addr ADDR            address krb5kdc listens on, UDP and TCP (default 127.0.0.1;
#                          run setup.sh under `ip netns exec NS` for a namespace's)
#   --port N               its port (default 88)
#   --server-host NAME     the NFS server's host name: principal nfs/NAME
#                          (default server.keel.test)
#   --client-host NAME     the client's host name: principals host/NAME, nfs/NAME
#                          (default client.keel.test)
#   --guest-kdc ADDR       the KDC's address as the client (run.sh's guest) sees it
#                          (default 10.0.2.2: qemu's user networking forwards it to
#                          this host's 127.0.0.1; with --tap the tap's address)
#   --uid-base N           alice's uid; bob is N+1, carol N+2 (default 10001)
#   --short-life SECONDS   carol's tickets live at most SECONDS (default 60): her
#                          ticket expires while a test runs
#
# What DIR holds afterwards:
#   env                    `. DIR/env` sets KRB5_CONFIG and KRB5_KDC_PROFILE to this
#                          realm's files, for kinit/klist/kvno/kadmin.local on this host
#   krb5.conf, kdc.conf    the host's view of the realm; the KDC's own settings
#   server.keytab          nfs/SERVER-HOST@REALM: the NFS server's key
#   client.keytab          host/CLIENT-HOST@REALM and nfs/CLIENT-HOST@REALM
#   USER.password, USER.keytab   for alice, bob and carol
#   users                  "NAME UID" per line
#   realm                  realm=REALM, kdc=ADDR:PORT, guest_kdc=ADDR:PORT (shell
#                          assignments, for trust.sh)
#   guest/                 what run.sh --krb5 DIR/guest puts into the guest: krb5.conf
#                          (the KDC at --guest-kdc), krb5.keytab (= client.keytab),
#                          the users' passwords and keytabs, users
#   kdc.pid, kdc.log, db/  the running KDC
# setup.sh prints "krb5-lab: REALM ready at ADDR:PORT" once alice can get a ticket
# from it. Exit codes: 2 usage, 3 a missing tool or package, 4 the KDC failed.
set -euo pipefail

fail() { echo "krb5-lab/setup.sh: $1" >&2; exit "${2:-4}"; }

[ $# -ge 1 ] || fail "usage: setup.sh DIR [--realm R] [--addr A] [--port N] [--server-host H] [--client-host H] [--guest-kdc A] [--uid-base N] [--short-life S]" 2
dir=$1; shift
realm=KEEL.TEST; addr=127.0.0.1; port=88; server_host=server.keel.test; client_host=client.keel.test
guest_kdc=10.0.2.2; uid_base=10001; short_life=60
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || fail "option $1 needs a value" 2
  case "$1" in
    --realm) realm=$2;; --addr) addr=$2;; --port) port=$2;;
    --server-host) server_host=$2;; --client-host) client_host=$2;;
    --guest-kdc) guest_kdc=$2;; --uid-base) uid_base=$2;; --short-life) short_life=$2;;
    *) fail "unknown option $1" 2;;
  esac
  shift 2
done
case "$realm" in *[!A-Z0-9.-]*|"") fail "--realm $realm: use upper-case letters, digits, dots and dashes" 2;; esac
case "$port$uid_base$short_life" in *[!0-9]*) fail "--port, --uid-base and --short-life take numbers" 2;; esac

# The KDC and its tools from Debian (krb5-kdc; krb5-user for kinit/klist/kvno/ktutil).
command -v ss >/dev/null || fail "ss is missing (apt-get install iproute2)" 3
need=""
for tool in krb5kdc:krb5-kdc kdb5_util:krb5-kdc kadmin.local:krb5-kdc kinit:krb5-user klist:krb5-user; do
  command -v "${tool%%:*}" >/dev/null || case " $need " in *" ${tool#*:} "*) ;; *) need="$need ${tool#*:}";; esac
done
if [ -n "$need" ]; then
  [ "$(id -u)" -eq 0 ] || fail "missing$need: install it (apt-get install$need) or run as root" 3
  echo "krb5-lab: installing$need" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need) >/dev/null 2>&1 \
    || fail "could not install$need (apt-get install$need)" 3
fi

if [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
  fail "$dir is not empty: give a new directory (stop.sh $dir first if a KDC runs there)" 2
fi
mkdir -p "$dir/db" "$dir/guest"
chmod 700 "$dir" "$dir/db"
dir=$(cd "$dir" && pwd)
export KRB5_CONFIG=$dir/krb5.conf KRB5_KDC_PROFILE=$dir/kdc.conf
printf 'export KRB5_CONFIG=%q KRB5_KDC_PROFILE=%q\n' "$KRB5_CONFIG" "$KRB5_KDC_PROFILE" >"$dir/env"
printf 'realm=%s\nkdc=%s:%s\nguest_kdc=%s:%s\n' "$realm" "$addr" "$port" "$guest_kdc" "$port" >"$dir/realm"

# No DNS anywhere: host names are what the files say (the guest's /etc/hosts).
krb5_conf() { # KDC-ADDRESS
  cat <<EOF
[libdefaults]
    default_realm = $realm
    dns_lookup_kdc = false
    dns_lookup_realm = false
    dns_canonicalize_hostname = false
    rdns = false
    udp_preference_limit = 1

[realms]
    $realm = {
        kdc = $1:$port
    }

[domain_realm]
    .${server_host#*.} = $realm
    $server_host = $realm
    $client_host = $realm
EOF
}
krb5_conf "$addr" >"$dir/krb5.conf"
krb5_conf "$guest_kdc" >"$dir/guest/krb5.conf"
cat >"$dir/kdc.conf" <<EOF
[kdcdefaults]
    kdc_listen = $addr:$port
    kdc_tcp_listen = $addr:$port

[realms]
    $realm = {
        database_name = $dir/db/principal
        key_stash_file = $dir/db/stash
        acl_file = $dir/db/kadm5.acl
        max_life = 10h
        max_renewable_life = 1d
        supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
    }

[logging]
    kdc = FILE:$dir/kdc.log
EOF

# The database's master password only guards the stash next to it.
kdb5_util create -s -r "$realm" -P "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')" >"$dir/kdb5_util.log" 2>&1 \
  || { cat "$dir/kdb5_util.log" >&2; fail "kdb5_util create failed (log above)"; }
kadmin() { kadmin.local -r "$realm" -q "$1" >>"$dir/kadmin.log" 2>&1 || { cat "$dir/kadmin.log" >&2; fail "kadmin.local -q '$1' failed"; }; }
# kadmin.local reports some errors with exit code 0: check the principal exists.
has_principal() { kadmin.local -r "$realm" -q "getprinc $1" 2>/dev/null | grep -q "^Principal: $1@$realm\$"; }

kadmin "addprinc -randkey nfs/$server_host"
kadmin "ktadd -k $dir/server.keytab nfs/$server_host"
kadmin "addprinc -randkey host/$client_host"
kadmin "addprinc -randkey nfs/$client_host"
kadmin "ktadd -k $dir/client.keytab host/$client_host nfs/$client_host"
uid=$uid_base
: >"$dir/users"
for user in alice bob carol; do
  # A random password per lab, in a file only its owner reads.
  od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$dir/$user.password"
  life=""
  [ "$user" = carol ] && life="-maxlife \"$short_life seconds\" -maxrenewlife \"$short_life seconds\""
  kadmin "addprinc $life -pw $(cat "$dir/$user.password") $user"
  # -norandkey: the keytab holds the password's keys, so both still work.
  kadmin "ktadd -norandkey -k $dir/$user.keytab $user"
  echo "$user $uid" >>"$dir/users"
  uid=$((uid + 1))
done
for p in "nfs/$server_host" "host/$client_host" "nfs/$client_host" alice bob carol; do
  has_principal "$p" || { cat "$dir/kadmin.log" >&2; fail "principal $p@$realm was not created"; }
done
chmod 600 "$dir"/*.keytab "$dir"/*.password
cp "$dir/client.keytab" "$dir/guest/krb5.keytab"
cp "$dir"/*.password "$dir"/alice.keytab "$dir"/bob.keytab "$dir"/carol.keytab "$dir/users" "$dir/guest/"

# krb5kdc binds with SO_REUSEADDR: a second KDC on a port in use starts
# and shares it, each answering some requests with its own keys. Refuse.
if ss -Htuln "src $addr and sport = :$port" 2>/dev/null | grep -q . ||
  ss -Htuln "src 0.0.0.0 and sport = :$port" 2>/dev/null | grep -q .; then
  fail "$addr:$port is in use here (another KDC?): give --port a free port" 4
fi
# Started as a daemon that writes its pid; ready once a user gets a ticket.
krb5kdc -P "$dir/kdc.pid" -r "$realm" >"$dir/krb5kdc.out" 2>&1 \
  || { cat "$dir/krb5kdc.out" "$dir/kdc.log" >&2 2>/dev/null; fail "krb5kdc did not start (is $addr:$port in use or not an address here?)"; }
ready=""
for _ in $(seq 50); do
  if KRB5CCNAME=FILE:$dir/probe.ccache kinit -k -t "$dir/alice.keytab" "alice@$realm" >/dev/null 2>&1; then
    ready=1; break
  fi
  sleep 0.2
done
rm -f "$dir/probe.ccache"
if [ -z "$ready" ]; then
  KRB5CCNAME=FILE:$dir/probe.ccache kinit -k -t "$dir/alice.keytab" "alice@$realm" >&2 || true
  tail -n 20 "$dir/kdc.log" >&2 2>/dev/null || true
  "$(dirname "$0")/stop.sh" "$dir" || true
  fail "the KDC at $addr:$port gave alice no ticket within 10 s (kinit's error and kdc.log above)"
fi
echo "krb5-lab: $realm ready at $addr:$port (pid $(cat "$dir/kdc.pid"), files in $dir)"
