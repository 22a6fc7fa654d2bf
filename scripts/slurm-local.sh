#!/usr/bin/env bash
# A real single-node Slurm on this machine, for CI: Debian's slurmctld, slurmd and munge with
# every file (config, state, spool, logs, pid files, munge socket) in one folder, loopback only.
# No file under /etc/slurm is written and nothing is started through systemd.
#
#   scripts/slurm-local.sh install         # apt-get install the four packages (idempotent)
#   scripts/slurm-local.sh start DIR       # start munged, slurmctld, slurmd; wait for the node
#   scripts/slurm-local.sh stop DIR        # stop them by their pid files
#
# After `start`, `export SLURM_CONF=DIR/slurm.conf` points sbatch, sinfo and squeue at it.
# Needs root (slurmd runs jobs as their user; SlurmUser=root).
set -euo pipefail

die() { echo "slurm-local: $*" >&2; exit 1; }

install_packages() {
  local missing=()
  for b in slurmctld slurmd sbatch munged; do
    command -v "$b" >/dev/null 2>&1 || missing+=("$b")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "missing ${missing[*]} and not root: install slurmctld slurmd slurm-client munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
}

start() {
  local dir="$1"
  [ "$(id -u)" -eq 0 ] || die "start needs root (SlurmUser=root, munged as the munge user)"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  # munged runs as the munge user: it must reach its own folder under DIR.
  chmod 755 "$dir"
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  chown munge:munge "$dir/munge"
  chmod 755 "$dir/munge"
  runuser -u munge -- test -w "$dir/munge" \
    || die "the munge user cannot reach $dir/munge: make every folder above it world-searchable (chmod 755)"
  if [ ! -s /etc/munge/munge.key ]; then
    if command -v mungekey >/dev/null 2>&1; then mungekey --create >/dev/null; else create-munge-key -f >/dev/null; fi
    chown munge:munge /etc/munge/munge.key
  fi
  runuser -u munge -- munged --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed"

  local host node
  host="$(hostname -s 2>/dev/null || cut -d. -f1 /proc/sys/kernel/hostname)"
  # The node line as slurmd sees this machine (CPUs, cores, memory), on loopback.
  node="$(slurmd -C | head -n 1) NodeAddr=127.0.0.1 State=UNKNOWN"
  cat >"$dir/slurm.conf" <<EOF
# Written by scripts/slurm-local.sh: a single-node Slurm for CI, loopback only.
ClusterName=memcal-ci
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
${node}
PartitionName=ci Nodes=${host} Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -f "$SLURM_CONF"
  slurmd -f "$SLURM_CONF"
  local k
  for k in $(seq 1 60); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qx idle; then
      echo "slurm-local: node ${host} idle (SLURM_CONF=$SLURM_CONF)"
      return 0
    fi
    sleep 0.5
  done
  sinfo >&2 || true
  tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
  die "the node did not become idle within 30 s (logs in $dir/log)"
}

stop_pid() {
  local file="$1" pid k
  [ -s "$file" ] || return 0
  pid="$(cat "$file")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for k in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$file"
}

stop() {
  local dir="$1" jobs
  # Cancel this cluster's jobs first, so that no task outlives its slurmd.
  if [ -s "$dir/slurmctld.pid" ] && [ -f "$dir/slurm.conf" ]; then
    jobs="$(SLURM_CONF="$dir/slurm.conf" timeout 10 squeue -h -o %i 2>/dev/null || true)"
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086
      SLURM_CONF="$dir/slurm.conf" timeout 10 scancel $jobs 2>/dev/null || true
      sleep 1
    fi
  fi
  stop_pid "$dir/slurmd.pid"
  stop_pid "$dir/slurmctld.pid"
  stop_pid "$dir/munge/munged.pid"
}

case "${1:-}" in
  install) install_packages ;;
  start) [ $# -eq 2 ] || die "usage: $0 start DIR"; start "$2" ;;
  stop) [ $# -eq 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 install | start DIR | stop DIR" ;;
esac
