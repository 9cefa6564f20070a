#!/usr/bin/env bash
# Build the Debian package from a binary built beforehand, with Debian's own
# tools (dpkg-deb, dpkg-shlibdeps); no debhelper tree, no cargo-deb to compile
# (docs/packaging.md says why).
#
# Usage: packaging/build-deb.sh [--test-build] BINARY VERSION OUTDIR
#   `make deb` passes target/release/tenure; tests/real_package.rs passes the
#   binary `make test` built, with --test-build (it carries the test bed, which a
#   package refuses otherwise: packaging/lib.sh). Prints the path of the .deb it wrote.
source "$(dirname "$0")/lib.sh"
args "$@"

ARCH=$(dpkg --print-architecture)
DEB_VERSION=$VERSION-1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/debian/tenure
stage "$root"

# The Debian packaging changelog lintian requires of a non-native package; the
# upstream one is changelog.gz.
date_rfc=$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")
cat >"$work/changelog.Debian" <<CL
tenure ($DEB_VERSION) unstable; urgency=medium

  * Built from tenure $VERSION (git $REV); the upstream changes are in
    /usr/share/doc/tenure/changelog.gz.

 -- $MAINTAINER  $date_rfc
CL
gzip -9n -c "$work/changelog.Debian" >"$root/usr/share/doc/tenure/changelog.Debian.gz"
chmod 0644 "$root/usr/share/doc/tenure/changelog.Debian.gz"
touch -d "@$SOURCE_DATE_EPOCH" "$root/usr/share/doc/tenure/changelog.Debian.gz"

# Depends from the libraries the binary links (dpkg-shlibdeps wants a control
# file naming the package, and the binary inside a package tree with DEBIAN/).
install -d -m 0755 "$root/DEBIAN"
printf 'Source: tenure\n\nPackage: tenure\nArchitecture: any\n' >"$work/debian/control"
# (Its "binaries to analyze should already be installed" warning is about a
# debhelper layout it guesses at; the result is the same.)
shlibs=$(cd "$work" && dpkg-shlibdeps -O -e debian/tenure/usr/bin/tenure 2> >(grep -v \
    "should already be installed in their package's directory" >&2))
shlibs=${shlibs#shlibs:Depends=}
[ -n "$shlibs" ] || die "dpkg-shlibdeps found no dependencies"

size=$(du -k -s --exclude=DEBIAN "$root" | cut -f1)
sed -e "s|@DEB_VERSION@|$DEB_VERSION|" -e "s|@ARCH@|$ARCH|" -e "s|@MAINTAINER@|$MAINTAINER|" \
    -e "s|@INSTALLED_SIZE@|$size|" -e "s|@SHLIBS_DEPENDS@|$shlibs|" \
    "$SRC/packaging/deb/control" >"$root/DEBIAN/control"
# The example is a conffile: an edited copy is never overwritten on upgrade.
echo /etc/tenure/tenure.example.toml >"$root/DEBIAN/conffiles"
for s in postinst postrm; do
    cp "$SRC/packaging/deb/$s" "$root/DEBIAN/$s"
    fill "$root/DEBIAN/$s"
    chmod 0755 "$root/DEBIAN/$s"
done
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z \
    | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

out=$OUTDIR/tenure_${DEB_VERSION}_$ARCH.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$out" >/dev/null
echo "$out"
