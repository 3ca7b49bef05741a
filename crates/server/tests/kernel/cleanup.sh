# Guest side of kernel_client::workload_on_rw_export (phase 2), on a fresh
# mount: the whole tree phase 1 left, 10,000-entry directory included, goes
# with rm -r.

# stdin is the guest's console, a tty: nothing may stop to ask (rm does).
exec </dev/null

result() { echo "RESULT $1=$2"; }

# A fresh client first sees what phase 1 left behind.
result before "$(ls w/many | wc -l)"
T=$(date +%s)
rm -r w
result rm_rc $?
echo "TIME rm_r $(($(date +%s) - T))s"
result gone "$([ ! -e w ] && [ ! -L w ] && echo yes)"
result left "$(ls -A | wc -l)"
result done 1
