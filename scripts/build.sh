#!/usr/bin/env bash
# build.sh: build every program into ${EAIMQ_BIN:-./bin}.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${EAIMQ_BIN:-$top/bin}
mkdir -p "$bin"
cd "$top"
for p in topology publish consumer brokerstatus dlq claimsys; do
	go build -o "$bin/$p" "./$p"
done
echo "build: topology publish consumer brokerstatus dlq claimsys -> $bin"
