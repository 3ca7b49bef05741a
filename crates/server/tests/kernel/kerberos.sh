# Guest side of kerberos_kernel.rs (the Debian guest, rpc.gssd running):
# /mnt/nfs is the Kerberos-only export mounted by run.sh with the boot's
# flavor; /opt/krb5-kernel.env names the port, the version and the export's
# path for the extra mounts; /opt/pattern is the data alice writes.
# Prints `RESULT key=value` lines that the host test checks.
exec </dev/null
result() { echo "RESULT $1=$2"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# The first line of a command's error output, its exit status otherwise.
err() { out=$("$@" 2>&1 >/dev/null) && echo "ok" || echo "${out%%
*}"; }
. /opt/krb5-kernel.env
m=/mnt/nfs
f=$m/alice-$vers
echo "erin:x:10005:10005::/tmp:/bin/sh" >> /etc/passwd
echo "erin:x:10005:" >> /etc/group
# The domain owner names are mapped in (this guest's DNS domain); the
# server's nfs4_idmap_domain is the same.
result idmap_domain "$(nfsidmap -d)"

result mount_sec "$(sed -n 's|^[^ ]* /mnt/nfs nfs4\{0,1\} .*[ ,]sec=\([a-z0-9]*\).*|\1|p' /proc/mounts)"
kinit-as alice && result alice_kinit ok
as-user alice sh -c "umask 077; cat /opt/pattern > $f" && result alice_wrote ok
drop_caches
result alice_read "$(as-user alice md5sum "$f" | cut -d' ' -f1)"
kinit-as bob && result bob_kinit ok
result bob_read "$(err as-user bob cat "$f")"
# Root has no ticket of its own: the machine's credential, no user's rights.
result root_read "$(err cat "$f")"
echo root > "$m/root-$vers" && result root_wrote ok

mkdir -p /mnt/other
if [ "$vers" = 3 ]; then
  v3="vers=3,proto=tcp,port=$port,mountport=$port,mountproto=tcp,nolock"
  if timeout 60 mount -t nfs -o "$v3,sec=krb5" "server.keel.test:$export" /mnt/other; then
    result krb5_mount ok
    result krb5_alice_read "$(as-user alice md5sum "/mnt/other/alice-$vers" | cut -d' ' -f1)"
    result krb5_bob_read "$(err as-user bob cat "/mnt/other/alice-$vers")"
    # carol's ticket is short (setup.sh --short-life): she works, it expires, every call
    # of hers is refused (O_DIRECT and a create: nothing from the cache),
    # and a fresh kinit carries on without a remount.
    kinit-as carol && result carol_kinit ok
    as-user carol sh -c "umask 077; echo carol-early > /mnt/other/carol" && result carol_wrote ok
    result carol_read "$(as-user carol dd if=/mnt/other/carol iflag=direct bs=4096 2>/dev/null)"
    i=0
    while as-user carol klist -s && [ $i -lt 120 ]; do sleep 1; i=$((i + 1)); done
    as-user carol klist -s && result carol_expired no || result carol_expired yes
    # The kernel's context ends with the ticket, by its own clock.
    sleep 2
    result carol_expired_read "$(err as-user carol dd if=/mnt/other/carol of=/dev/null iflag=direct bs=4096)"
    result carol_expired_write "$(err as-user carol sh -c "echo late > /mnt/other/carol-late")"
    kinit-as carol && result carol_rekinit ok
    result carol_again_read "$(as-user carol dd if=/mnt/other/carol iflag=direct bs=4096 2>/dev/null)"
    as-user carol sh -c "echo carol-again > /mnt/other/carol-again" && result carol_again_wrote ok
    umount /mnt/other
  fi
  # alice of a realm KEEL.TEST trusts, and of one it does not: the same
  # short name as the server's alice, under guest users of their own (the
  # kernel keeps a context per uid: guest alice's is KEEL.TEST's).
  for who in "other 20001 OTHER.TEST" "notrust 20002 NOTRUST.TEST"; do
    read -r name uid realm <<WHO
$who
WHO
    echo "$name:x:$uid:$uid::/tmp:/bin/sh" >> /etc/passwd
    echo "$name:x:$uid:" >> /etc/group
    as-user "$name" kinit "alice@$realm" < "/etc/krb5-lab/alice.$realm.password" > /dev/null && result "${name}_kinit" ok
    result "${name}_principal" "$(as-user "$name" klist | sed -n 's/^Default principal: //p')"
    result "${name}_read" "$(err as-user "$name" cat "$f")"
    result "${name}_wrote" "$(err as-user "$name" sh -c "echo $realm > $m/$name-realm")"
  done
  # The server's own alice still has her rights.
  drop_caches
  result alice_after_foreign "$(as-user alice md5sum "$f" | cut -d' ' -f1)"
  sys="$v3,sec=sys"
else
  # krb5i over NFSv4 too (names only: this boot's wire must show none of
  # the file's bytes in the clear).
  if timeout 60 mount -t nfs4 -o "vers=$vers,proto=tcp,port=$port,sec=krb5i" "server.keel.test:$export" /mnt/other; then
    result krb5i_mount ok
    result krb5i_alice_list "$(as-user alice ls /mnt/other | tr '\n' ' ')"
    umount /mnt/other
  fi
  # erin is the server's 20005 and this guest's 10005 (added before any
  # listing: an owner the idmapper could not map stays cached): with names
  # in the replies the guest shows her as its own erin.
  result erin_owner "$(stat -c %U:%u:%G "$m/erin-file")"
  # And the client names owners itself: a SETATTR with alice@keel.test.
  result alice_chgrp "$(err as-user alice chgrp alice "$f")"
  sys="vers=$vers,proto=tcp,port=$port,sec=sys"
fi
# AUTH_SYS on a Kerberos-only export is refused.
if timeout 60 mount -t nfs -o "$sys,retry=0" "server.keel.test:$export" /mnt/other 2>/tmp/sys-mount.err; then
  result sys_mount mounted
  umount /mnt/other
else
  result sys_mount refused
  cat /tmp/sys-mount.err
fi
result done 1
