# Guest side of kernel_client::workload_on_rw_export (phase 1), run by the
# kernel NFS client's VM in the export's root. Prints `RESULT key=value`
# lines that the host test checks, together with the export directory itself.
# No `set -e`: every step reports what happened and the host decides.

# stdin is the guest's console, a tty: nothing may stop to ask (rm does).
exec </dev/null

result() { echo "RESULT $1=$2"; }
# Step durations (guest clock: only differences mean anything).
now() { date +%s; }
lap() { t=$(now); echo "TIME $1 $((t - T))s"; T=$t; }
# Clean pages and cached dentries go, so the next read really crosses the wire.
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# `stat` that prints the error text instead of nothing on failure.
st() { stat -c "$1" "$2" 2>&1; }
T=$(now)

# Non-root users for the permission checks (the guest's / is 0700).
chmod 755 /
mkdir -p /etc
echo 'root:x:0:0::/:/bin/sh' > /etc/passwd
echo 'alice:x:1234:5678::/:/bin/sh' >> /etc/passwd
echo 'bob:x:4321:4321::/:/bin/sh' >> /etc/passwd

# Nested mkdir.
mkdir -p w/a/b/c/d/e && mkdir w/x w/x/y
[ -d w/a/b/c/d/e ] && [ -d w/x/y ] && result nested_mkdir ok
lap mkdir

# Create, write and read back 256 MiB: the digest of the stream as written,
# then of the file as read back over NFS with cold caches.
result big_written_md5 "$(dd if=/dev/urandom bs=1M count=256 2>/dev/null | tee w/a/b/c/d/e/big | md5sum | cut -d' ' -f1)"
lap big_write
drop_caches
result big_read_md5 "$(md5sum < w/a/b/c/d/e/big | cut -d' ' -f1)"
result big_size "$(st %s w/a/b/c/d/e/big)"
lap big_read

# A small file: create, write, read back.
echo "hello keel" > w/hello
drop_caches
result hello "$(cat w/hello)"

# Append: O_APPEND writes land at the end, across a 1 MiB boundary.
echo one > w/log
echo two >> w/log
echo three >> w/log
dd if=/dev/urandom of=/tmp/head bs=1k count=1000 2>/dev/null
dd if=/dev/urandom of=/tmp/tail bs=1k count=24 2>/dev/null
cat /tmp/head > w/app
cat /tmp/tail >> w/app
drop_caches
result log "$(cat w/log | tr '\n' ,)"
result app_size "$(st %s w/app)"
result app_expected_md5 "$(cat /tmp/head /tmp/tail | md5sum | cut -d' ' -f1)"
result app_md5 "$(md5sum < w/app | cut -d' ' -f1)"

# Truncate: shrink, then extend (the new part reads as zeros), and O_TRUNC.
dd if=/dev/urandom of=/tmp/trunc bs=1k count=100 2>/dev/null
cat /tmp/trunc > w/trunc
truncate -s 1000 w/trunc
result trunc_shrunk_size "$(st %s w/trunc)"
truncate -s 50000 w/trunc
drop_caches
result trunc_size "$(st %s w/trunc)"
result trunc_md5 "$(md5sum < w/trunc | cut -d' ' -f1)"
result trunc_expected_md5 "$({ head -c 1000 /tmp/trunc; head -c 49000 /dev/zero; } | md5sum | cut -d' ' -f1)"
result trunc_tail_nonzero "$(dd if=w/trunc bs=1000 skip=1 2>/dev/null | tr -d '\000' | wc -c)"
dd if=/dev/urandom of=w/emptied bs=1k count=10 2>/dev/null
: > w/emptied
result emptied_size "$(st %s w/emptied)"
lap small_files

# Rename across directories: a file (the big one) and a directory subtree.
mv w/a/b/c/d/e/big w/x/y/big.moved
mv w/a/b/c/d w/x/d2
[ ! -e w/a/b/c/d ] && [ -d w/x/d2/e ] && [ -f w/x/y/big.moved ] && result renamed ok
result big_moved_size "$(st %s w/x/y/big.moved)"

# Hard links: one inode, three names, in three directories.
echo linked > w/orig
ln w/orig w/x/hard1
ln w/orig w/a/hard2
echo more >> w/x/hard1
drop_caches
result nlink "$(st %h w/orig)"
result same_inode "$([ "$(st %i w/orig)" = "$(st %i w/x/hard1)" ] && [ "$(st %i w/orig)" = "$(st %i w/a/hard2)" ] && echo yes)"
result via_orig "$(cat w/orig | tr '\n' ,)"

# Symbolic links: relative to a file, to a directory, dangling.
ln -s ../orig w/x/sym
ln -s a/b w/dirsym
ln -s /nonexistent/target w/dangling
result sym_target "$(readlink w/x/sym)"
result sym_read "$(cat w/x/sym | tr '\n' ,)"
result dirsym_list "$(ls w/dirsym | tr '\n' ,)"
result dangling_target "$(readlink w/dangling)"
result dangling_read "$(cat w/dangling 2>&1)"

# chmod: plain, setuid, sticky and setgid directories.
echo perm > w/perm
chmod 640 w/perm
echo suid > w/suid
chmod 4755 w/suid
mkdir w/sticky w/sgid
chmod 1777 w/sticky
chmod 2750 w/sgid
result perm_mode "$(st %a w/perm)"
result sticky_mode "$(st %a w/sticky)"
result sgid_mode "$(st %a w/sgid)"
# chown clears setuid (the kernel's rule, which the server must keep).
chown 1234 w/suid
result suid_after_chown "$(st %a w/suid):$(st %u w/suid)"

# chown and its effect: alice (1234:5678) owns a 0600 file, bob does not.
echo secret > w/owned
chown 1234:5678 w/owned
chmod 600 w/owned
result owned_ids "$(st %u:%g w/owned)"
result owned_mode "$(st %a w/owned)"
result alice_read "$(su alice -c 'cat w/owned' 2>&1)"
result bob_read "$(su bob -c 'cat w/owned' 2>&1)"
result bob_write "$(su bob -c 'echo bob >> w/owned' 2>&1)"
result bob_chmod "$(su bob -c 'chmod 666 w/owned' 2>&1)"
su alice -c 'echo alice >> w/owned'
# Group access: bob's group reads a 0640 file, alice (another group) cannot.
echo group > w/grp
chgrp 4321 w/grp
chmod 640 w/grp
result grp_ids "$(st %u:%g w/grp)"
result bob_grp_read "$(su bob -c 'cat w/grp' 2>&1)"
result alice_grp_read "$(su alice -c 'cat w/grp' 2>&1)"
# alice may create in her own 0700 directory, bob may not even look.
mkdir w/alicedir
chown 1234:5678 w/alicedir
chmod 700 w/alicedir
su alice -c 'echo in > w/alicedir/f'
result alicedir_file "$(st %u:%g w/alicedir/f)"
result bob_ls_alicedir "$(su bob -c 'ls w/alicedir' 2>&1)"
lap links_modes

# A directory of 10,000 entries, created here, listed with cold caches.
mkdir w/many
(cd w/many && seq -w 1 10000 | sed 's/^/entry-/' | xargs touch)
lap create_10000
drop_caches
result many_count "$(ls w/many | wc -l)"
result many_unique "$(ls w/many | sort | uniq | wc -l)"
result many_md5 "$(ls w/many | sort | md5sum | cut -d' ' -f1)"
drop_caches
result many_find "$(find w/many -type f | wc -l)"
lap list_10000

result done 1
