#!/bin/bash
# Cross-realm trust between two running labs (setup.sh with different
# --realm and --port), for tests of principals of a foreign realm.
#
# usage: trust.sh LAB OTHER [--no-trust]
#
# OTHER's users get tickets for LAB's services, one way (as a site trusts a
# partner's realm): the cross-realm key krbtgt/LAB-REALM@OTHER-REALM, with
# one random password, in both KDCs' databases (the running KDCs read it at
# the next request). LAB's krb5.conf and guest/krb5.conf learn OTHER's KDC
# (the client's library goes from OTHER's KDC to LAB's directly), and
# LAB/guest gets OTHER's users' passwords as USER.OTHER-REALM.password, which
# run.sh's guest gives to its local USER like USER.password:
#
#   as-user alice sh -c 'kinit alice@OTHER.TEST </etc/krb5-lab/alice.OTHER.TEST.password'
#
# --no-trust: the same configuration and passwords but no key: OTHER's users
# get tickets from their own KDC and none for LAB's services.
# Exit codes: 2 usage, 4 a KDC's database refused the key.
set -euo pipefail

fail() { echo "krb5-lab/trust.sh: $1" >&2; exit "${2:-4}"; }

[ $# -ge 2 ] || fail "usage: trust.sh LAB OTHER [--no-trust]" 2
lab=$1 other=$2 key=1
[ $# -le 2 ] || { [ "$3" = --no-trust ] && [ $# = 3 ]; } || fail "unknown option ${3:-}: usage: trust.sh LAB OTHER [--no-trust]" 2
[ $# = 3 ] && key=""
for d in "$lab" "$other"; do
  [ -f "$d/realm" ] && [ -f "$d/env" ] || fail "$d is not a lab made by setup.sh (no $d/realm)" 2
done
lab_realm=$(. "$lab/realm" && echo "$realm")
read -r other_realm other_kdc other_guest_kdc < <(. "$other/realm" && echo "$realm $kdc $guest_kdc")
[ "$lab_realm" != "$other_realm" ] || fail "$lab and $other are both $lab_realm: give setup.sh --realm another name" 2

if [ -n "$key" ]; then
  password=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  for d in "$lab" "$other"; do
    realm=$(. "$d/realm" && echo "$realm")
    # Same name, password and salt in both databases: the same key.
    (. "$d/env" && kadmin.local -r "$realm" -q "addprinc -pw $password krbtgt/$lab_realm@$other_realm") \
      >>"$d/kadmin.log" 2>&1 || fail "kadmin.local in $d could not add krbtgt/$lab_realm@$other_realm (see $d/kadmin.log)"
    (. "$d/env" && kadmin.local -r "$realm" -q "getprinc krbtgt/$lab_realm@$other_realm") 2>/dev/null |
      grep -q "^Principal: krbtgt/$lab_realm@$other_realm\$" ||
      fail "krbtgt/$lab_realm@$other_realm is not in $d's database (see $d/kadmin.log)"
  done
fi

# OTHER's KDC in LAB's [realms] section, for the host and the guest.
add_realm() { # FILE KDC
  awk -v r="$other_realm" -v k="$2" '
    { print }
    /^\[realms\]$/ { printf "    %s = {\n        kdc = %s\n    }\n", r, k }
  ' "$1" >"$1.new" && mv "$1.new" "$1"
}
add_realm "$lab/krb5.conf" "$other_kdc"
add_realm "$lab/guest/krb5.conf" "$other_guest_kdc"
while read -r user _; do
  install -m 600 "$other/$user.password" "$lab/guest/$user.$other_realm.password"
done <"$other/users"
echo "krb5-lab: $other_realm's users $([ -n "$key" ] && echo "get tickets for $lab_realm's services" || echo "are known to $lab_realm's clients, without trust")"
