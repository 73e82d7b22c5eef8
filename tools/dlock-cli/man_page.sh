#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Writes dlock(1), gzipped, from the command's own help: help2man turns `dlock --help` and
# `dlock --version` into the page, and each subcommand's `dlock CMD --help` (up to the notes
# on nodes and exit statuses that every subcommand repeats from the main help) becomes a
# subsection of COMMANDS, word for word (wrapped to 80 columns). The page cannot say other
# than --help does; FLOCK COMPATIBILITY, ENVIRONMENT and EXAMPLES come from man_sections.h2m.
# Usage: man_page.sh DLOCK_BINARY OUTPUT.1.gz   (tools/dlock-cli/CMakeLists.txt runs it)
set -euo pipefail
bin=$1
out=$2
include=$(mktemp)
page=$(mktemp)
trap 'rm -f "$include" "$page"' EXIT

# Lines of a --help text longer than 73 columns (man indents the subsections by 7), wrapped
# at spaces; a continuation starts under the text it continues (after an option's column, or
# a list item's "- "), so that the page fits in 80 columns.
wrap() {
  awk -v width=73 '
    function continuation_indent(line,   lead, rest, gap) {
      match(line, /^ */); lead = RLENGTH
      rest = substr(line, lead + 1)
      if (substr(rest, 1, 2) == "- ") return lead + 2
      if (match(rest, /[^ ]  +[^ ]/)) return lead + RSTART + RLENGTH - 2
      return lead
    }
    length($0) <= width { print; next }
    {
      line = $0; indent = continuation_indent(line); pad = sprintf("%" indent "s", "")
      while (length(line) > width) {
        cut = 0
        for (i = width + 1; i > indent + 1; --i) if (substr(line, i, 1) == " ") { cut = i; break }
        if (cut == 0) break  # one word longer than the line: left as it is
        print substr(line, 1, cut - 1)
        rest = substr(line, cut + 1); sub(/^ +/, "", rest)
        line = pad rest
      }
      print line
    }'
}

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
    "$bin" "$cmd" --help | awk '/^Nodes: / { done = 1 } !done { print }' | wrap |
      sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"
    echo '.fi'
  done
  # FLOCK COMPATIBILITY, ENVIRONMENT, EXAMPLES: written for the page, in 80 columns.
  cat "$(dirname "$0")/man_sections.h2m"
} >"$include"
help2man --no-info --section 1 --name "run commands under a distributed lock on Redis" \
         --include "$include" --output "$page" "$bin"
# The main help's "Exit status:" list is the page's EXIT STATUS section.
sed -i 's/^\.SS "Exit status:"$/.SH "EXIT STATUS"/' "$page"
gzip -9n <"$page" >"$out"
