# Sourced by run.sh for `--kernel SUITE`: the newest cloud kernel of Debian
# SUITE, fetched once into $cache/kernel-SUITE (its vmlinuz, its modules with
# a modules.dep made here, since the package's postinst would make it), and
# `suite_modules`, which copies modules and everything they need into a base
# image, decompressed (busybox's insmod reads plain .ko files), in load order.
# Sets kernel, kver and M as run.sh's host-kernel path does.
suite_dir=$cache/kernel-$kernel_suite
if [ ! -f "$suite_dir/version" ]; then
  for t in curl xz depmod dpkg-deb; do
    command -v $t >/dev/null || { echo "kernel-nfs-client: --kernel needs $t" >&2; exit 3; }
  done
  mirror=${KCLIENT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  tmp=$(mktemp -d "$cache/kernel.XXXX")
  deb=$(curl -fsS -m 120 "$mirror/dists/$kernel_suite/main/binary-amd64/Packages.xz" | xz -dc \
    | awk '/^Package: linux-image-[0-9][^ ]*-cloud-amd64-unsigned$/ { p = 1 } p && /^Filename:/ { print $2 } /^$/ { p = 0 }' \
    | sort -V | tail -1)
  [ -n "$deb" ] || { rm -rf "$tmp"; echo "kernel-nfs-client: no cloud kernel found in $mirror $kernel_suite" >&2; exit 3; }
  echo "kernel-nfs-client: fetching $deb" >&2
  curl -fsS -m 900 -o "$tmp/k.deb" "$mirror/$deb" && dpkg-deb -x "$tmp/k.deb" "$tmp/x" \
    || { rm -rf "$tmp"; echo "kernel-nfs-client: could not fetch or unpack $mirror/$deb" >&2; exit 3; }
  # Debian 13 ships modules under /usr/lib (merged /usr); older ones under /lib.
  mods=$(ls -d "$tmp"/x/usr/lib/modules/* "$tmp"/x/lib/modules/* 2>/dev/null | head -1)
  v=$(basename "$mods")
  depmod -b "${mods%/lib/modules/*}" "$v" || { rm -rf "$tmp"; echo "kernel-nfs-client: depmod failed for $v" >&2; exit 3; }
  mkdir "$tmp/k" && mv "$tmp/x/boot/vmlinuz-$v" "$tmp/k/vmlinuz" && mv "$mods" "$tmp/k/modules" && echo "$v" >"$tmp/k/version" \
    || { rm -rf "$tmp"; exit 3; }
  rm -rf "$suite_dir" && mv "$tmp/k" "$suite_dir" && rm -rf "$tmp"
fi
kernel=$suite_dir/vmlinuz; kver=$(cat "$suite_dir/version"); M=$suite_dir/modules

# suite_modules DIR NAME...: NAME's modules and what they need (modules.dep
# lists every module a module needs, the last first to load) into DIR, with
# DIR/order. A module built into the kernel has no line and needs nothing.
suite_modules() {
  local dir=$1 name line dep rel seen=" "
  shift
  for name; do
    line=$(grep -E "(^|/)$name\.ko(\.xz|\.zst|\.gz)?:" "$M/modules.dep") || continue
    local need=("${line%%:*}")
    for dep in ${line#*:}; do need=("$dep" "${need[@]}"); done
    for rel in "${need[@]}"; do
      case "$seen" in *" $rel "*) continue;; esac
      seen="$seen$rel "
      local ko; ko=$(basename "$rel"); ko=${ko%.xz}; ko=${ko%.zst}; ko=${ko%.gz}
      case "$rel" in
        *.xz) xz -dc "$M/$rel" >"$dir/$ko";;
        *.zst) zstd -dcq "$M/$rel" >"$dir/$ko";;
        *.gz) gzip -dc "$M/$rel" >"$dir/$ko";;
        *) cp "$M/$rel" "$dir/$ko";;
      esac || return 1
      echo "$ko" >>"$dir/order"
    done
  done
}
