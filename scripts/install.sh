#!/usr/bin/env bash
# install.sh: build the programs and put them where the lab's grader looks.
#
#   scripts/install.sh [DIR]        DIR defaults to $EAIMQ_INSTALL_DIR or /root/eaimw/mq
#
# Installs topology, publish, consumer, brokerstatus and dlq, and the lab's
# script names topology.py, publish.py and consumer.py. With python3 on the
# machine each .py is a three-line Python shim that execs the Go binary
# beside it, so both ways a grader may call a lab script work:
#   /root/eaimw/mq/publish.py claim.json          (by path, through the shebang)
#   python3 /root/eaimw/mq/publish.py claim.json  (through the interpreter)
# Without python3 the .py is a copy of the binary (the by-path call works).
# EAIMQ_PY_NAMES=binary forces the copy.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-${EAIMQ_INSTALL_DIR:-/root/eaimw/mq}}
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
EAIMQ_BIN=$tmp "$top/scripts/build.sh" >/dev/null
for p in topology publish consumer brokerstatus dlq; do
	install -m 0755 "$tmp/$p" "$dest/$p"
done
mode=${EAIMQ_PY_NAMES:-auto}
# The system's python3 starts fastest (a pyenv shim adds a bash and more).
py=$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3 || true)
if [ "$mode" = auto ]; then
	if [ -n "$py" ]; then mode=shim; else mode=binary; fi
fi
for p in topology publish consumer; do
	if [ "$mode" = shim ]; then
		cat >"$dest/$p.py.tmp" <<PY
#!$py
# eaimq: the lab's $p.py, replaced by the Go program $p beside this file.
import os, sys
exe = os.path.join(os.path.dirname(os.path.realpath(__file__)), "$p")
os.execv(exe, [exe] + sys.argv[1:])
PY
		chmod 0755 "$dest/$p.py.tmp"
		mv "$dest/$p.py.tmp" "$dest/$p.py"
	else
		install -m 0755 "$tmp/$p" "$dest/$p.py"
	fi
done
echo "install: topology publish consumer brokerstatus dlq -> $dest (lab names *.py: $mode)"
