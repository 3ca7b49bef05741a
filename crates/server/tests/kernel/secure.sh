# Guest side of kernel_client::secure_export_through_a_tap_device. Root on
# a `secure`, no_root_squash export, reached without NAT: the kernel's
# calls come from reserved ports, so root writes as root.

exec </dev/null

result() { echo "RESULT $1=$2"; }

result whoami "$(id -u):$(id -g)"
echo "written by the guest's root" > by-root
result rc_write $?
mkdir made-by-root
result rc_mkdir $?
result read "$(cat by-root)"
result done 1
