#!/bin/sh
# Runs the strategy campaigns one after the other (resumable: rows on disk are skipped).
# Usage: measurement/campaigns/run-strategies.sh [path/to/memcal-measure]
set -u
M=${1:-target/release/memcal-measure}
for s in checkpoint lora qlora inference zero1; do
  "$M" campaign "measurement/campaigns/cpu-$s.toml" --out "data/runs/cpu-$s/" --run-timeout-s 300
done
