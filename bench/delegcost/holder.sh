# The second client of bench/deleg-readdir.sh (the busybox guest): creates
# HELD empty files in /mnt/nfs/DIR (open for writing, close), keeping the
# write delegation the server grants on each (the Linux client returns none while it holds fewer than its
# delegation_watermark, 5000), then idles until it is killed. With
# HELD=0 it only idles: the same guest is on the machine either way.
# /opt/holder.env: held, dir.
exec </dev/null
. /opt/holder.env
i=1
while [ "$i" -le "$held" ]; do
  : > "/mnt/nfs/$dir/f$i" || { echo "HOLDER failed at f$i"; exit 1; }
  i=$((i + 1))
done
echo "HOLDER ready $held"
echo "-"
sleep 3000
