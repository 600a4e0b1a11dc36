#!/usr/bin/env bash
# Lays out the runtime image's filesystem from a built `floe` binary:
# DIR/image holds the binary, the shared libraries it links (glibc's), CA
# certificates for TLS to object stores and a `floe` user (uid 65532);
# DIR/data is the empty folder that becomes /var/lib/floe, owned by that
# user. The image is then these and nothing else (FROM scratch): no shell,
# no package manager.
#
#   deploy/container/rootfs.sh target/release/floe DIR
set -euo pipefail
binary=$1
root=$2/image

mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/tmp" "$root/var/lib" "$2/data"
install -m 0755 "$binary" "$root/usr/local/bin/floe"

# The dynamic loader and each library, at the path the binary asks for.
ldd "$binary" | awk '/=> \// { print $3 } /^[ \t]*\// { print $1 }' | while read -r lib; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done

ca=/etc/ssl/certs/ca-certificates.crt
if [ -f "$ca" ]; then cp "$ca" "$root$ca"; fi

# Host names from /etc/hosts (which runtimes provide), then DNS.
echo 'hosts: files dns' > "$root/etc/nsswitch.conf"
echo 'floe:x:65532:65532:floe:/var/lib/floe:/sbin/nologin' > "$root/etc/passwd"
echo 'floe:x:65532:' > "$root/etc/group"
chmod 1777 "$root/tmp"
