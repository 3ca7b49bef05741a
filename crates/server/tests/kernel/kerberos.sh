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
    umount /mnt/other
  fi
  sys="$v3,sec=sys"
else
  # krb5i over NFSv4 too (names only: this boot's wire must show none of
  # the file's bytes in the clear).
  if timeout 60 mount -t nfs4 -o "vers=$vers,proto=tcp,port=$port,sec=krb5i" "server.keel.test:$export" /mnt/other; then
    result krb5i_mount ok
    result krb5i_alice_list "$(as-user alice ls /mnt/other | tr '\n' ' ')"
    umount /mnt/other
  fi
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
