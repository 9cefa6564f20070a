#!/usr/bin/env bash
# Build the RPM from a binary built beforehand, with rpmbuild (Debian's `rpm`
# package has it); no cargo-generate-rpm to compile (docs/packaging.md says why).
# The files and paths are the .deb's (packaging/lib.sh stages both).
#
# Usage: packaging/build-rpm.sh [--test-build] BINARY VERSION OUTDIR
#   As build-deb.sh. Prints the path of the .rpm it wrote.
source "$(dirname "$0")/lib.sh"
args "$@"

command -v rpmbuild >/dev/null || die "rpmbuild not found (Debian: apt-get install rpm)"
ARCH=$(uname -m)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage "$work/stage"

rpm_date=$(LC_ALL=C date -u -d "@$SOURCE_DATE_EPOCH" '+%a %b %d %Y')
rpm_version=${VERSION//-/\~}
sed -e "s|@VERSION@|$rpm_version|g" -e "s|@STAGE@|$work/stage|" -e "s|@RPM_DATE@|$rpm_date|" \
    -e "s|@MAINTAINER@|$MAINTAINER|" -e "s|@REV@|$REV|" \
    "$SRC/packaging/tenure.spec" >"$work/tenure.spec"
fill "$work/tenure.spec"

# Everything rpmbuild writes stays in $work (no ~/rpmbuild, no ~/.rpmmacros
# needed); the clamp keeps file dates at SOURCE_DATE_EPOCH.
rpmbuild -bb --quiet --target "$ARCH" \
    --define "_topdir $work/rpmbuild" \
    --define "_rpmdir $OUTDIR" \
    --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
    --define "use_source_date_epoch_as_buildtime 1" \
    --define "clamp_mtime_to_source_date_epoch 1" \
    "$work/tenure.spec" >"$work/rpmbuild.log" 2>&1 || {
    cat "$work/rpmbuild.log" >&2
    die "rpmbuild failed"
}
out=$OUTDIR/tenure-$rpm_version-1.$ARCH.rpm
[ -f "$out" ] || { cat "$work/rpmbuild.log" >&2; die "rpmbuild wrote no $out"; }
echo "$out"
