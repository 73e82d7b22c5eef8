#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The built dlock(1) has the sections a user looks for and fits in 80 columns, as man renders
# it. Usage: man_page_test.sh dlock.1.gz   (ctest runs it as cli.man_page)
set -euo pipefail
page=$1
command -v man >/dev/null || { echo "man_page_test: no man(1): scripts/bootstrap installs man-db" >&2; exit 1; }
# The C locale: a UTF-8 one makes quotes and dashes three bytes, which awk would count as three
# columns.
text=$(LC_ALL=C MANWIDTH=80 man -l "$page" 2>/dev/null)
status=0
for section in NAME SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS" COMMANDS "FLOCK COMPATIBILITY" \
               ENVIRONMENT EXAMPLES; do
  grep -qx "$section" <<<"$text" || { echo "no $section section" >&2; status=1; }
done
wide=$(awk 'length > 80' <<<"$text")
if [ -n "$wide" ]; then
  echo "lines wider than 80 columns:" >&2
  echo "$wide" >&2
  status=1
fi
exit $status
