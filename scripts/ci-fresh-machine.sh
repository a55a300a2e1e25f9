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
# The node20 block runs the whole suite with every tool; here, without them, the files whose tests skip or change when a
# tool is missing (and the packed-package and example checks, which a fresh install may break): the rest would run the
# same twice.
fresh_files="test/system-tools.test.ts test/sandbox.test.ts test/process.test.ts test/process-probe.test.ts
  test/workflows-postgres.test.ts test/code-mode-approvals-postgres.test.ts test/workflows-options.test.ts
  test/cli-runs.test.ts test/docs.test.ts test/package-packed.test.ts test/entry-imports.test.ts"
commands=$(printf '%s\n' "$commands" | sed "s|^npm test$|npm test -- $(echo $fresh_files)|")
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
