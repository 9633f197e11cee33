#!/usr/bin/env bash
# demo.sh: first version: broker up, topology declared, status printed.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
scripts/mq-up.sh
go build -o bin/topology ./topology
bin/topology
bin/topology -check
