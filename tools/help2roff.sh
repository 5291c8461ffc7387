#!/usr/bin/env bash
# A man page from a tool's --help text, so that the page cannot say other than --help:
#   help2roff.sh TOOL NAME "one-line description" > NAME.1
# (mgraph-run's page is written from its flag table by mgraph-flag-docs instead.)
set -euo pipefail
tool=$1 name=$2 what=$3
help=$("$tool" --help 2>&1) || { echo "help2roff: $tool --help failed" >&2; exit 1; }
upper=$(tr '[:lower:]' '[:upper:]' <<< "$name")
printf '.TH %s 1 "" "mgraph" "User Commands"\n.SH NAME\n%s \\- %s\n.SH DESCRIPTION\n' "$upper" "$name" "$what"
printf 'Generated from\n.B %s \\-\\-help\n(tools/help2roff.sh).\n.PP\n.nf\n' "$name"
# roff: backslashes escaped, a line starting with . or ' protected, hyphens kept as minus signs
sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" <<< "$help"
printf '.fi\n.SH SEE ALSO\n.BR mgraph-run (1)\n'
