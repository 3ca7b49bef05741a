# Sourced by run.sh for `--guest debian`: turns the busybox initramfs in $work
# into one that boots the Debian root (debian-root.sh, an ext4 image attached
# with snapshot=on) after loading the modules and bringing the network up,
# and sets guest_disk to the qemu options that attach it. The Debian root runs
# rpc.gssd before mounting, so `--opts sec=krb5|krb5i|krb5p` mounts with
# Kerberos; the guest script runs there, as root, under /bin/sh (dash).
# Uses run.sh's variables: here work M script export_path tries server
# server_name guest_ip guest_name statd krb5_dir no_mount cpu.

image=$("$here/debian-root.sh") || exit 3

# Beyond the NFS client's modules: the root disk (virtio_blk, ext4 and the
# crc32c its metadata checksums need), RPCSEC_GSS with Kerberos and the
# crypto it asks for (cts for aes*-cts), NFSv4 with the resolver its idmapper
# and referrals use. The root has no modprobe: everything is loaded here.
for m in lib/crc16 fs/mbcache fs/jbd2/jbd2 crypto/crc32c_generic fs/ext4/ext4 drivers/block/virtio_blk \
         crypto/cts net/sunrpc/auth_gss/auth_rpcgss net/sunrpc/auth_gss/rpcsec_gss_krb5 \
         net/dns_resolver/dns_resolver fs/nfs/nfsv4; do
  grep -qx "$(basename $m).ko" $work/lib/modules/order && continue
  cp $M/kernel/$m.ko $work/lib/modules/ && echo $(basename $m).ko >> $work/lib/modules/order || exit 3
done
# With --cpu (a model with AES-NI and SSSE3/AVX2): the drivers that use them,
# which the kernel prefers to its generic AES and SHA-1 once loaded.
if [ -n "$cpu" ]; then
  for m in crypto/cryptd crypto/crypto_simd arch/x86/crypto/aesni-intel arch/x86/crypto/sha1-ssse3; do
    grep -qx "$(basename $m).ko" $work/lib/modules/order && continue
    cp $M/kernel/$m.ko $work/lib/modules/ && echo $(basename $m).ko >> $work/lib/modules/order || exit 3
  done
fi

# What the Debian root gets on top of the image: the guest script, --file's
# files, the Kerberos files of --krb5 (tools/krb5-lab/setup.sh's DIR/guest),
# the harness's helpers and its init.
p=$work/payload
mkdir -p $p/etc/krb5-lab $p/usr/local/sbin $p/usr/local/bin $p/opt
cp $work/guest.sh $p/guest.sh
cp -a $work/opt/. $p/opt/
cp $work/bin/mountnfs $p/usr/local/sbin/
[ -n "$statd" ] && cp $work/bin/kstatd $p/usr/local/sbin/
if [ -n "$krb5_dir" ]; then
  [ -f "$krb5_dir/krb5.conf" ] || { echo "kernel-nfs-client: --krb5 $krb5_dir has no krb5.conf (give tools/krb5-lab/setup.sh's DIR/guest)" >&2; exit 2; }
  cp -a "$krb5_dir"/. $p/etc/krb5-lab/ || exit 3
  cp "$krb5_dir/krb5.conf" $p/etc/krb5.conf
  if [ -f "$krb5_dir/krb5.keytab" ]; then cp "$krb5_dir/krb5.keytab" $p/etc/krb5.keytab; chmod 600 $p/etc/krb5.keytab; fi
fi
cat > $p/usr/local/bin/as-user <<'EOF'
#!/bin/sh
# as-user USER COMMAND [ARG...]: runs COMMAND as USER (its uid, gid and groups,
# HOME, a fresh environment), so its Kerberos cache is /tmp/krb5cc_UID, which
# rpc.gssd finds for that uid.
[ $# -ge 2 ] || { echo "usage: as-user USER COMMAND [ARG...]" >&2; exit 2; }
u=$1; shift
exec setpriv --reuid="$u" --regid="$u" --init-groups --reset-env -- "$@"
EOF
cat > $p/usr/local/bin/kinit-as <<'EOF'
#!/bin/sh
# kinit-as USER [KINIT-OPTION...]: USER gets a ticket with the password in
# /etc/krb5-lab/USER.password (readable by USER only).
[ $# -ge 1 ] || { echo "usage: kinit-as USER [KINIT-OPTION...]" >&2; exit 2; }
u=$1; shift
exec as-user "$u" sh -c 'kinit "$@" "$0" </etc/krb5-lab/"$0".password >/dev/null' "$u" "$@"
EOF
chmod 755 $p/usr/local/bin/as-user $p/usr/local/bin/kinit-as

mount_src=${server_name:-$server}:$export_path
cat > $p/kclient-init <<INIT
#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t tmpfs -o mode=0755 run /run; mount -t tmpfs -o mode=1777 tmp /tmp
mkdir -p /run/rpc_pipefs /var/log /mnt/nfs; mount -t rpc_pipefs rpc_pipefs /run/rpc_pipefs
${guest_name:+hostname '$guest_name'}
# Kerberos names the server by its host name: it must resolve to the address mounted from.
{ echo "127.0.0.1 localhost"; ${guest_name:+echo "$guest_ip $guest_name"; }${server_name:+echo "$server $server_name"; }} > /etc/hosts
if [ -f /etc/krb5-lab/users ]; then
  while read -r name uid; do
    echo "\$name:x:\$uid:\$uid::/home/\$name:/bin/sh" >> /etc/passwd
    echo "\$name:x:\$uid:" >> /etc/group
    mkdir -p /home/\$name; chown \$uid:\$uid /home/\$name
    for f in /etc/krb5-lab/\$name.*; do [ -e "\$f" ] && chown \$uid:\$uid "\$f"; done
  done < /etc/krb5-lab/users
fi
$([ -n "$statd" ] && echo "kstatd || echo 'kstatd failed'")
# rpc.gssd must hold the kernel's gssd pipe before the mount, or the kernel
# refuses RPCSEC_GSS at once.
rpc.gssd -f -vv > /var/log/rpc.gssd.log 2>&1 &
gssd=\$!
i=0
until ls -l /proc/\$gssd/fd 2>/dev/null | grep -q 'rpc_pipefs/gssd/'; do
  i=\$((i+1)); [ \$i -le 100 ] || { echo "KCLIENT-GSSD-NOT-READY"; cat /var/log/rpc.gssd.log; break; }
  sleep 0.1
done
# The kernel's messages went to the console log until here (run.sh boots
# without "quiet"): from the mount on, only errors.
echo 4 > /proc/sys/kernel/printk
if [ -n "$no_mount" ]; then
  echo "KCLIENT-MOUNTING nothing (--no-mount)"; echo "KCLIENT-MOUNTED nothing (--no-mount)"
  cd /root; sh /guest.sh; rc=\$?; cd /
else
  echo "KCLIENT-MOUNTING $mount_src"
  mounted=""
  for mountopts in $tries; do
    if mountnfs $mount_src /mnt/nfs \$mountopts; then mounted=\$mountopts; break; fi
  done
  if [ -n "\$mounted" ]; then
    echo "KCLIENT-MOUNTED $mount_src (\$mounted)"
    cd /mnt/nfs; sh /guest.sh; rc=\$?; cd /
    umount /mnt/nfs || echo "KCLIENT-UMOUNT-FAILED"
  else
    rc=125
    echo "rpc.gssd's log:"; cat /var/log/rpc.gssd.log
  fi
fi
echo "KCLIENT-EXIT rc=\$rc"
sync; echo o > /proc/sysrq-trigger; sleep 10
INIT
chmod 755 $p/kclient-init

# The initramfs only readies the machine and hands over to the Debian root.
cat > $work/init <<INIT
#!/bin/sh
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev 2>/dev/null
for m in \$(cat /lib/modules/order); do insmod /lib/modules/\$m || echo "insmod \$m failed"; done
ip link set lo up; ip link set eth0 up; ip addr add $guest_ip/24 dev eth0; ip route add default via $server
mkdir -p /newroot
i=0; until [ -b /dev/vda ]; do i=\$((i+1)); [ \$i -le 100 ] || break; sleep 0.1; done
if ! mount -t ext4 /dev/vda /newroot; then
  echo "KCLIENT-MOUNTING none: mount failed: the Debian root /dev/vda"; echo "KCLIENT-EXIT rc=3"; poweroff -f
fi
cp -a /payload/. /newroot/
for d in dev proc sys; do mount --move /\$d /newroot/\$d; done
exec switch_root /newroot /kclient-init
INIT
chmod +x $work/init
guest_disk=(-drive "file=$image,format=raw,if=virtio,snapshot=on")
