#!/usr/bin/env bash
# Writes dlock(1), gzipped, from the command's own help: help2man turns `dlock --help` and
# `dlock --version` into the page, and each subcommand's `dlock CMD --help` (up to the notes
# on nodes and exit statuses that every subcommand repeats from the main help) becomes a
# subsection of COMMANDS, word for word. The page cannot say other than --help does.
# Usage: man_page.sh DLOCK_BINARY OUTPUT.1.gz   (tools/dlock-cli/CMakeLists.txt runs it)
set -euo pipefail
bin=$1
out=$2
include=$(mktemp)
page=$(mktemp)
trap 'rm -f "$include" "$page"' EXIT

# awk reads to the end rather than exit early: an early exit would end `dlock --help` with
# SIGPIPE once its output is longer than one write, and pipefail fails the build on it.
subcommands=$("$bin" --help | awk '/^Subcommands:/ { on = 1; next }
                                   on && /^  [a-z]/ { print $1; next }
                                   on { on = 0 }')
[ -n "$subcommands" ] || { echo "man_page.sh: no subcommands in '$bin --help'" >&2; exit 1; }
{
  echo '[COMMANDS]'
  for cmd in $subcommands; do
    echo ".SS \"dlock $cmd\""
    echo '.nf'
    # roff: a backslash is written \e, and a line may not start with . or '
    "$bin" "$cmd" --help | awk '/^Nodes: / { done = 1 } !done { print }' |
      sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"
    echo '.fi'
  done
} >"$include"
help2man --no-info --section 1 --name "run commands under a distributed lock on Redis" \
         --include "$include" --output "$page" "$bin"
gzip -9n <"$page" >"$out"
