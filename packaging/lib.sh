# Shared by packaging/build-deb.sh and packaging/build-rpm.sh (sourced, not run):
# checks the arguments, stages the files both packages carry at the same paths,
# and fills the maintainer-script fragments. docs/packaging.md lists every file
# and why it goes where it goes; tests/real_package.rs checks both packages
# against that list.

set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MAINTAINER=${TENURE_MAINTAINER:-tenure maintainers <tenure@example.org>}

die() {
    echo "$(basename "$0"): $*" >&2
    exit 1
}

# args [--test-build] BINARY VERSION OUTDIR: sets BIN, VERSION, OUTDIR (absolute),
# REV (from the binary's own --version, so the package says what it carries).
# The binary must not carry the test bed (check-no-testbed.sh): what `make deb` and
# `make rpm` ship never does. --test-build lifts that for tests/real_package.rs,
# which packages the binary `make test` built, with the `testbed` feature on
# (docs/packaging.md, "The test bed", says what differs).
args() {
    local test_build=0
    if [ "${1:-}" = --test-build ]; then
        test_build=1
        shift
    fi
    [ $# = 3 ] || die "usage: $(basename "$0") [--test-build] BINARY VERSION OUTDIR"
    BIN=$1 VERSION=$2 OUTDIR=$3
    [ -x "$BIN" ] || die "$BIN: not an executable file"
    if [ "$test_build" = 0 ]; then
        "$SRC/packaging/check-no-testbed.sh" "$BIN" \
            || die "refusing to package $BIN: it carries the test bed (--test-build packages a test build)"
    fi
    [[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+([~+.][0-9A-Za-z.~+]*)?$ ]] \
        || die "$VERSION: not a version like 0.1.0"
    local said
    said=$("$BIN" --version) || die "$BIN --version failed"
    # "tenure 0.1.0 (git abc1234)"
    [[ $said =~ ^tenure\ ([^ ]+)\ \(git\ ([^\)]+)\)$ ]] \
        || die "$BIN --version said '$said', not 'tenure VERSION (git REV)'"
    [ "${BASH_REMATCH[1]}" = "$VERSION" ] \
        || die "$BIN is version ${BASH_REMATCH[1]}, not $VERSION"
    REV=${BASH_REMATCH[2]}
    mkdir -p "$OUTDIR"
    OUTDIR=$(cd "$OUTDIR" && pwd)
    # One date for every timestamp: SOURCE_DATE_EPOCH, else the last commit's.
    if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
        SOURCE_DATE_EPOCH=$(git -C "$SRC" log -1 --format=%ct 2>/dev/null || date +%s)
    fi
    export SOURCE_DATE_EPOCH
}

# stage DESTDIR: every file both packages install, with its mode; owners are set by
# the package formats (root, and group tenure for /etc/tenure by the scripts).
stage() {
    local d=$1
    rm -rf "$d"
    install -d -m 0755 "$d/usr/bin" "$d/usr/lib/systemd/system" "$d/usr/lib/udev/rules.d" \
        "$d/usr/lib/sysusers.d" "$d/etc/tenure" "$d/usr/share/man/man8" "$d/usr/share/doc/tenure"
    # The binary without its symbols (a dev build is ~100 MB with them).
    strip --strip-unneeded --remove-section=.comment --remove-section=.note \
        -o "$d/usr/bin/tenure" "$BIN"
    chmod 0755 "$d/usr/bin/tenure"
    install -m 0644 "$SRC/systemd/tenure.service" "$SRC/systemd/tenure@.service" \
        "$d/usr/lib/systemd/system/"
    install -m 0644 "$SRC/udev/60-tenure-watchdog.rules" "$d/usr/lib/udev/rules.d/"
    install -m 0644 "$SRC/packaging/tenure.sysusers" "$d/usr/lib/sysusers.d/tenure.conf"
    install -m 0644 "$SRC/packaging/tenure.example.toml" "$d/etc/tenure/tenure.example.toml"
    gzip -9n -c "$SRC/docs/tenure.8" >"$d/usr/share/man/man8/tenure.8.gz"
    local doc=$d/usr/share/doc/tenure
    install -m 0644 "$SRC/README.md" "$SRC/docs/operations.md" "$SRC/docs/packaging.md" \
        "$SRC/docs/design.md" "$SRC/docs/timing.md" "$SRC/docs/failure-modes.md" \
        "$SRC/packaging/copyright" "$SRC/LICENSE" "$doc/"
    gzip -9n -c "$SRC/CHANGELOG.md" >"$doc/changelog.gz"
    chmod 0644 "$d/usr/share/man/man8/tenure.8.gz" "$doc/changelog.gz"
    find "$d" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
}

# The sysusers.d line the group scripts feed to systemd-sysusers: the shipped
# file's only non-comment line, so the two cannot disagree.
sysusers_line() {
    local line
    line=$(grep -v '^[[:space:]]*\(#\|$\)' "$SRC/packaging/tenure.sysusers")
    [ "$(printf '%s\n' "$line" | wc -l)" = 1 ] || die "tenure.sysusers: expected one entry"
    printf '%s' "$line"
}

# fill FILE: replace each #GROUP# and #RELOAD# line with the shared fragment
# (packaging/scripts/), indented like the marker, in place.
fill() {
    local f=$1 group
    group=$(mktemp)
    sed "s|@SYSUSERS_LINE@|$(sysusers_line)|" "$SRC/packaging/scripts/group.sh" >"$group"
    awk -v group="$group" -v reload="$SRC/packaging/scripts/reload.sh" '
        function put(file, indent,   l) {
            while ((getline l < file) > 0) print (l == "" ? "" : indent l)
            close(file)
        }
        {
            key = $0; sub(/^[ \t]+/, "", key); sub(/[ \t]+$/, "", key)
            indent = $0; sub(/[^ \t].*$/, "", indent)
            if (key == "#GROUP#") put(group, indent)
            else if (key == "#RELOAD#") put(reload, indent)
            else print
        }' "$f" >"$f.new"
    rm -f "$group"
    mv "$f.new" "$f"
}
