#!/usr/bin/env bash
# Checks that every file the build and the tests take from the system belongs to a
# Debian package in the Makefile's DEB_PACKAGES list (or to one a fresh Debian 12
# has anyway: Priority required/important). A build on a machine that already has
# everything cannot notice a gap in the list (it once missed libprotobuf-dev, which
# `--no-install-recommends` leaves out); this check can. Run it after installing
# (`make check-deps`; .ci/run does, before the tests).
#
# Usage: packaging/check-deps.sh "pkg1 pkg2 ..."
set -euo pipefail

listed=" $1 "
fail=0
# What `apt-get install --no-install-recommends <list>` brings: the list and its
# hard dependencies (Depends, Pre-Depends), recursively.
closure=" $(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances $1 2>/dev/null \
    | grep -v '^ ' | grep -v '^<' | cut -d: -f1 | sort -u | tr '\n' ' ') "

owner() { # the package owning a file, without the :arch suffix
    dpkg -S "$1" 2>/dev/null | head -n1 | cut -d: -f1 | cut -d, -f1
}

check_file() { # what, path
    local what=$1 path=$2 pkg prio
    if [ ! -e "$path" ]; then
        echo "check-deps: $what: $path is missing" >&2; fail=1; return
    fi
    # Debian 12 is usr-merged: dpkg may know /usr/sbin/ip as /bin/ip or /sbin/ip.
    pkg=""
    for p in "$path" "$(readlink -f "$path")" "${path#/usr}" "/bin/${path##*/}" "/sbin/${path##*/}"; do
        [ -n "$pkg" ] || pkg=$(owner "$p" || true)
    done
    if [ -z "$pkg" ]; then
        echo "check-deps: $what: $path belongs to no Debian package (installed by hand?)" >&2
        fail=1; return
    fi
    case "$listed" in *" $pkg "*) echo "ok  $what: $path ($pkg)"; return ;; esac
    case "$closure" in *" $pkg "*) echo "ok  $what: $path ($pkg, a dependency of the list)"; return ;; esac
    prio=$(dpkg-query -W -f='${Priority}' "$pkg" 2>/dev/null || true)
    case "$prio" in
        required|important) echo "ok  $what: $path ($pkg, priority $prio)" ;;
        *) echo "check-deps: $what: $path comes from '$pkg' (priority '${prio:-?}'), which is not in DEB_PACKAGES" >&2
           fail=1 ;;
    esac
}

# Programs the build, the demo and the tests run (the packaging ones:
# packaging/build-*.sh, tests/real_package.rs; openssl: the TLS tests; curl:
# tests/real_api_tls.rs; dnsmasq: tests/real_srv.rs; pgbackrest:
# tests/real_replica_methods.rs).
for tool in protoc etcd etcdctl openssl curl haproxy nft ip fusermount3 dnsmasq pgbackrest \
    dpkg-deb dpkg-shlibdeps rpmbuild rpm lintian systemd-analyze systemd-sysusers strip; do
    path=$(command -v "$tool" || true)
    check_file "program $tool" "${path:-/usr/bin/$tool}"
done
for tool in postgres pg_ctl initdb pg_rewind pg_basebackup pg_controldata; do
    check_file "program $tool" "/usr/lib/postgresql/15/bin/$tool"
done

# The well-known protobuf files etcd-client's .proto files import; protoc finds
# them under /usr/include (libprotobuf-dev), not in etcd-client's own tree.
# `cargo metadata` fetches and unpacks the locked etcd-client if need be.
manifest=$(cargo metadata --format-version 1 --locked \
    | grep -o '"manifest_path":"[^"]*/etcd-client-[^"]*"' | head -n1 | cut -d'"' -f4)
protos=${manifest%/Cargo.toml}/proto
if [ -z "$manifest" ] || [ ! -d "$protos" ]; then
    echo "check-deps: could not find etcd-client's .proto files (cargo metadata: '$manifest')" >&2
    exit 1
fi
imports=$(grep -rhoE 'import "google/protobuf/[^"]+"' "$protos" | sed 's/import "//; s/"$//' | sort -u)
[ -n "$imports" ] || { echo "check-deps: found no google/protobuf imports in $protos" >&2; exit 1; }
for imp in $imports; do
    check_file "protoc include $imp" "/usr/include/$imp"
done

if [ "$fail" != 0 ]; then
    echo "check-deps: add the packages above to DEB_PACKAGES in the Makefile (.ci/run installs that list)" >&2
    exit 1
fi
echo "check-deps: every system file the build and tests use comes from a listed package"
