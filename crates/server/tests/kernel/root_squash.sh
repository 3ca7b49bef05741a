# Guest side of kernel_client::root_squash_export: root on a root_squash
# export is nobody (65534:65534); other users keep their own identity.

# stdin is the guest's console, a tty: nothing may stop to ask (rm does).
exec </dev/null

result() { echo "RESULT $1=$2"; }
st() { stat -c "$1" "$2" 2>&1; }
try() {
  key=$1; shift
  out=$("$@" 2>&1)
  result "rc_$key" $?
  result "err_$key" "$(echo "$out" | head -1)"
}

chmod 755 /
mkdir -p /etc
echo 'root:x:0:0::/:/bin/sh' > /etc/passwd
echo 'alice:x:1234:5678::/:/bin/sh' >> /etc/passwd

result whoami "$(id -u):$(id -g)"
echo mine > mine
mkdir mydir
echo nested > mydir/f
result mine_ids "$(st %u:%g mine)"
result mydir_ids "$(st %u:%g mydir)"
result nested_ids "$(st %u:%g mydir/f)"

# Files of the host's root: 0600 unreadable, 0644 readable but not writable,
# a 0755 directory closed to changes.
try read_secret cat secret
try read_public cat public
try append_public sh -c 'echo x >> public'
try rm_in_rootdir rm -f rootdir/inside
try create_in_rootdir sh -c 'echo x > rootdir/new'
try chmod_secret chmod 644 secret
# Giving a file away to root is not nobody's right either.
try chown_mine chown 0:0 mine
result mine_ids_after "$(st %u:%g mine)"

# A non-root user is not squashed.
su alice -c 'echo a > alicefile'
result alice_ids "$(st %u:%g alicefile)"
result done 1
