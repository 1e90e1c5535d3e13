#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for the course's srun tests and demos.
#
#   tools/local_slurm.sh install      apt-get install slurm-wlm and munge when missing (root)
#   tools/local_slurm.sh start DIR    start munged, slurmctld and slurmd, all files in DIR
#   tools/local_slurm.sh stop DIR     stop them, and every process the cluster started
#
# After `start`, point SLURM's commands at the cluster: export SLURM_CONF=DIR/slurm.conf
# (then: srun -N1 -n2 python script.py). Everything the cluster writes (config, munge key and
# socket, pid files, spool, state, logs) stays in DIR; nothing goes to /etc, /run or /var, and
# the daemons listen on free ports on 127.0.0.1, so a second cluster can run beside this one.
# Needs root (slurmd starts the tasks).
set -euo pipefail

PACKAGES=(slurm-wlm munge)
READY_TIMEOUT=${LOCAL_SLURM_READY_TIMEOUT:-120}  # seconds; generous, the machine may be busy

die() { echo "local_slurm: $*" >&2; exit 1; }

installed() { command -v srun >/dev/null && command -v slurmctld >/dev/null \
              && command -v slurmd >/dev/null && command -v munged >/dev/null; }

install() {
  installed && return 0
  [ "$(id -u)" = 0 ] || die "installing ${PACKAGES[*]} needs root: sudo $0 install"
  command -v apt-get >/dev/null || die "no apt-get here: install ${PACKAGES[*]} with your package manager"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
  fi
  installed || die "apt-get installed ${PACKAGES[*]}, but srun, slurmctld, slurmd or munged is missing"
}

free_port() {
  "${PYTHON:-python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

write_config() {  # DIR
  local dir=$1 node
  node=$(hostname -s)
  cat >"$dir/slurm.conf" <<EOF
# Written by tools/local_slurm.sh: one node, everything under $dir.
ClusterName=course
# JAX's coordinator port derives from the job id: start at a random one
FirstJobId=$((RANDOM * 32 + RANDOM % 32 + 1))
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.socket
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
ReturnToService=2
# A JAX process catches SIGTERM (preemption notice): SIGKILL it 3 s after, not the default 30 s
KillWait=3
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmdSpoolDir=$dir/spool
StateSaveLocation=$dir/state
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
PlugStackConfig=$dir/plugstack.conf
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
  : >"$dir/plugstack.conf"
}

start() {  # DIR
  local dir=$1
  [ "$(id -u)" = 0 ] || die "starting slurmd needs root"
  installed || die "SLURM is not installed; run: sudo $0 install"
  mkdir -p "$dir/spool" "$dir/state"
  chmod 700 "$dir"
  dir=$(cd "$dir" && pwd)
  [ ! -e "$dir/slurmctld.pid" ] || die "a cluster already runs from $dir; stop it first: $0 stop $dir"
  head -c 1024 /dev/urandom >"$dir/munge.key"
  chmod 400 "$dir/munge.key"
  write_config "$dir"
  export SLURM_CONF=$dir/slurm.conf
  if ! { munged --force --key-file="$dir/munge.key" --socket="$dir/munge.socket" \
            --pid-file="$dir/munged.pid" --seed-file="$dir/munged.seed" \
            --log-file="$dir/munged.log" 2>>"$dir/munged.log" \
          && slurmctld -c && slurmd -c; }; then
    echo "local_slurm: a daemon did not start; logs in $dir" >&2
    stop "$dir"
    exit 1
  fi
  local deadline=$((SECONDS + READY_TIMEOUT)) state=""
  while [ $SECONDS -lt $deadline ]; do
    state=$(sinfo -h -o %T 2>/dev/null || true)
    [ "$state" = idle ] && { echo "export SLURM_CONF=$SLURM_CONF"; return 0; }
    sleep 0.5
  done
  echo "local_slurm: the node is not idle after ${READY_TIMEOUT} s (state: ${state:-none}); logs in $dir" >&2
  stop "$dir"
  exit 1
}

running() {  # PID: it exists and is not a zombie
  [ -r "/proc/$1/status" ] && ! grep -qs '^State:[[:space:]]*Z' "/proc/$1/status"
}

cluster_pids() {  # DIR [PID...]: which of the PIDs, and of this cluster's steps and tasks, still run
  local dir=$1 pid file
  shift
  for pid in "$@"; do
    if running "$pid"; then echo "$pid"; fi
  done
  # Started with this cluster's SLURM_CONF and part of a job (a task) or a step daemon; a
  # shell where you exported SLURM_CONF yourself is neither, and is left alone.
  for file in $(grep -lszxF "SLURM_CONF=$dir/slurm.conf" /proc/[0-9]*/environ); do
    pid=${file#/proc/}
    pid=${pid%/environ}
    [ "$pid" != $$ ] || continue
    if { grep -qsz '^SLURM_JOB_ID=' "$file" || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmstepd ]; } \
       && running "$pid"; then
      echo "$pid"
    fi
  done
}

wait_until_gone() {  # SECONDS DIR [PID...]: wait for them to end; print those still running
  local tries=$(($1 * 5)) dir=$2 pids
  shift 2
  for _ in $(seq "$tries"); do
    pids=$(cluster_pids "$dir" "$@")
    [ -n "$pids" ] || return 0
    sleep 0.2
  done
  echo $pids
}

stop() {  # DIR
  local dir=$1 name pid daemons=() left
  [ -d "$dir" ] || return 0
  dir=$(cd "$dir" && pwd)
  export SLURM_CONF=$dir/slurm.conf
  for name in slurmd slurmctld munged; do
    pid=$(cat "$dir/$name.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && running "$pid"; then daemons+=("$pid"); fi
  done
  if [ ${#daemons[@]} -gt 0 ]; then  # first the jobs, while slurmd can still end them
    scancel --full --user=root >/dev/null 2>&1 || true
    wait_until_gone 10 "$dir" >/dev/null || true
    kill -TERM "${daemons[@]}" 2>/dev/null || true
  fi
  left=$(wait_until_gone 10 "$dir" "${daemons[@]}")
  if [ -n "$left" ]; then kill -KILL $left 2>/dev/null || true; fi
  rm -f "$dir"/*.pid
}

case "${1:-}" in
  install) install ;;
  start) [ $# = 2 ] || die "usage: $0 start DIR"; start "$2" ;;
  stop) [ $# = 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 install | start DIR | stop DIR" ;;
esac
