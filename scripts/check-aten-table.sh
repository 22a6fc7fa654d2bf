#!/usr/bin/env bash
# Regenerates the ATen operator table from the pinned torch wheel (.libtorch, see
# scripts/setup-libtorch.sh) into a temporary file and checks it is byte-identical to the
# committed src/ops/aten_table.rs. Exit 1 when they differ.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
table="$root/src/ops/aten_table.rs"
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT

PYTHONPATH="$root/.libtorch${PYTHONPATH:+:$PYTHONPATH}" \
  python3 "$root/scripts/gen_aten_table.py" --quiet --out "$tmp"

if ! cmp -s "$tmp" "$table"; then
  echo "check-aten-table: src/ops/aten_table.rs differs from what scripts/gen_aten_table.py generates;" >&2
  echo "  regenerate: PYTHONPATH=.libtorch python3 scripts/gen_aten_table.py --out src/ops/aten_table.rs" >&2
  exit 1
fi
echo "aten table OK: $(grep -c '^    AtenOp {$' "$table") ops"
