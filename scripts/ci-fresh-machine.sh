#!/usr/bin/env bash
# The README's set-up commands in a fresh clone, as on a machine with only Node and npm: bubblewrap and runsc are hidden
# (a mount namespace covers each with a file that is not executable), no PostgreSQL server is named, and missing tools
# may skip their tests. Needs root.
set -euo pipefail
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
# The commands of the README's "## Developing" block, without their comments.
commands=$(awk '/^## Developing/ { in_section = 1; next } in_section && /^## / { exit }
  in_section && /^```sh/ { in_block = 1; next } in_block && /^```/ { exit } in_block { print }' "$repo/README.md" |
  sed -e 's/[[:space:]]*#.*$//' -e '/^[[:space:]]*$/d')
[ -n "$commands" ] || { echo "$0: README.md has no sh block under ## Developing" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/airlock"
: > "$work/not-a-tool"
mounts=""
for tool in bwrap runsc; do
  for dir in /usr/bin /usr/local/bin /bin /usr/sbin /usr/local/sbin /sbin; do
    [ -e "$dir/$tool" ] && mounts+="mount --bind $work/not-a-tool $(realpath "$dir/$tool"); "
  done
done
echo "in a fresh clone, with bwrap and runsc hidden:"
printf '%s\n' "$commands" | sed 's/^/  /'
cd "$work/airlock"
env -u AIRLOCK_REQUIRE_SYSTEM_TOOLS -u AIRLOCK_TEST_POSTGRES_URL unshare -m bash -euo pipefail -c "
  $mounts
  for tool in bwrap runsc; do
    if path=\$(command -v \$tool) && [ -x \"\$path\" ]; then echo \"\$tool is still there: \$path\" >&2; exit 1; fi
  done
  $commands"
