# The measuring client of bench/deleg-readdir.sh (the Debian guest):
# LISTINGS times `ls -l` of /mnt/nfs/list (FILES files), each after the
# guest's caches are dropped, so that each listing reads the directory
# with READDIR (asking each entry's attributes, size and change among
# them) rather than from the client's caches. Each listing's wall time,
# between two "KCPU" lines the host reads the server's CPU time at.
# /opt/lister.env: listings, condition, round.
exec </dev/null
. /opt/lister.env
. /opt/guest-lib.sh
kcpu() { echo "KCPU $*"; echo "-"; }
for i in $(seq "$listings"); do
  drop_caches
  kcpu begin "$condition $round $i"
  t0=$(date +%s%N)
  n=$(ls -l /mnt/nfs/list | wc -l)
  t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 ))
  kcpu end "$condition $round $i $ms"
  result row "$condition $round $i $ms $n"
done
result done 1
