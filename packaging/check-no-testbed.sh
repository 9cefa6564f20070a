#!/usr/bin/env bash
# Fails if BINARY carries the test bed's test-only parts: network namespaces, the
# delaying relay, the watchdog stand-in's support, the notify socket reader (the
# `testbed` cargo feature, which only tests, examples and benches turn on;
# docs/packaging.md, "The test bed"). It looks for the strings in
# packaging/testbed-markers.txt, which only those parts hold.
#
# Usage: packaging/check-no-testbed.sh BINARY
#   exit 0: none found; 1: found (each one printed); 2: usage or unreadable input.
set -euo pipefail

here=$(dirname "$0")
[ $# = 1 ] || { echo "usage: $(basename "$0") BINARY" >&2; exit 2; }
bin=$1
[ -f "$bin" ] && [ -r "$bin" ] || { echo "$(basename "$0"): $bin: not a readable file" >&2; exit 2; }
patterns=$(grep -v -e '^#' -e '^$' "$here/testbed-markers.txt" | cut -f2)
[ -n "$patterns" ] || { echo "$(basename "$0"): no markers in $here/testbed-markers.txt" >&2; exit 2; }

# -a: the binary as text; -o: each hit alone; -F: fixed strings. grep exits 1 when
# nothing matched (the good case) and 2 on an error.
rc=0
found=$(grep -a -o -F -e "$patterns" "$bin" | LC_ALL=C sort -u) || rc=$?
case $rc in
    0)
        echo "$(basename "$0"): $bin carries the test bed (the \`testbed\` feature): it holds" >&2
        printf '%s\n' "$found" | sed 's/.*/  "&"/' >&2
        echo "  build it without the feature (\`cargo build --release --bin tenure\`, as \`make deb\` does)" >&2
        exit 1
        ;;
    1) exit 0 ;;
    *) echo "$(basename "$0"): grep failed on $bin" >&2; exit 2 ;;
esac
