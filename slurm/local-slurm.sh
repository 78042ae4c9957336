#!/usr/bin/env bash
# A one-node Slurm on this machine, for trying mpiopt's batch scripts and for CI.
#
#   bash slurm/local-slurm.sh start    # install (if missing) and start munge, slurmctld, slurmd; wait for the node
#   bash slurm/local-slurm.sh status   # sinfo and squeue
#   bash slurm/local-slurm.sh stop     # stop the daemons
#   bash slurm/local-slurm.sh cpus     # print the CPU count the node gets
#
# Debian's packages, no systemd: the daemons are started directly, as root.
# Minimal configuration: no cgroups (proctrack/linuxproc, task/none), no
# accounting (job state comes from squeue and scontrol), MpiDefault=pmi2 (and
# the PMIx library, so that srun --mpi=pmix starts Open MPI's ranks), one
# node sized from the CPUs this process may run on and the free memory, one
# partition "debug".  A requeued job may start again 11 s after its requeue
# (AuthInfo=cred_expire=10: the lifetime of a job's credentials, which Slurm
# waits out before it runs a requeued job again; its default, 120, kept a
# requeued job pending for 121 s with Reason=BeginTime).  The CPUs are
# counted with nproc without OMP_NUM_THREADS and OMP_THREAD_LIMIT (plain nproc
# honours them: with the usual HPC setting OMP_NUM_THREADS=1 it would make a
# 1-CPU node on which 2-task jobs never start); nproc still honours the CPU
# affinity, unlike nproc --all.
# Written to /etc/slurm/slurm.conf (the path sbatch reads by default); state
# and logs under $MPIOPT_SLURM_STATE (default /var/tmp/mpiopt-slurm).
set -euo pipefail

STATE=${MPIOPT_SLURM_STATE:-/var/tmp/mpiopt-slurm}
CONF=/etc/slurm/slurm.conf
NODE=$(hostname -s)

install_packages() {
    # srun's pmix plugin opens libpmix.so (libpmix-dev) when slurmd starts: without it --mpi=pmix fails
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        && command -v munged >/dev/null && ldconfig -p | grep -q 'libpmix\.so '; then
        return
    fi
    echo "local-slurm: installing munge, Slurm and PMIx from the distribution's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq munge slurmctld slurmd slurm-client libpmix-dev >/dev/null
}

cpu_count() {
    env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc
}

write_config() {
    local cpus memory
    cpus=$(cpu_count)
    memory=$(awk '/MemAvailable/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    mkdir -p "$STATE/ctld" "$STATE/spool" /etc/slurm
    PREVIOUS_CONFIG=$(grep -v '^NodeName=' "$CONF" 2>/dev/null || true)  # the node's line: checked below
    cat > "$CONF" <<CONFIG
# Written by mpiopt's slurm/local-slurm.sh: a one-node Slurm for testing.
ClusterName=mpiopt-local
SlurmctldHost=$NODE
AuthType=auth/munge
AuthInfo=cred_expire=10
SlurmUser=root
MpiDefault=pmi2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
InactiveLimit=0
KillWait=10
MinJobAge=600
NodeName=$NODE CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONFIG
    [ "$(grep -v '^NodeName=' "$CONF")" = "$PREVIOUS_CONFIG" ] || CONFIG_CHANGED=1
}

start_munge() {
    if pgrep -x munged >/dev/null; then
        return
    fi
    mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
    chmod 0400 /etc/munge/munge.key
    chmod 0755 /run/munge
    runuser -u munge -- /usr/sbin/munged
}

require_running() {
    if ! pgrep -x "$1" >/dev/null; then
        echo "local-slurm: $1 did not start; its log:" >&2
        tail -n 20 "$2" >&2 2>/dev/null || true
        exit 1
    fi
}

start() {
    install_packages
    write_config
    start_munge
    require_running munged /var/log/munge/munged.log
    if pgrep -x slurmctld >/dev/null && [ -n "${CONFIG_CHANGED:-}" ]; then
        echo "local-slurm: warning: Slurm is already running with an older $CONF; apply the new one with:" \
            "bash $0 stop && bash $0 start" >&2
    fi
    pgrep -x slurmctld >/dev/null || slurmctld -i
    pgrep -x slurmd >/dev/null || slurmd
    sleep 0.5
    require_running slurmctld "$STATE/slurmctld.log"
    require_running slurmd "$STATE/slurmd.log"
    local cpus configured
    cpus=$(cpu_count)
    for _ in $(seq 1 60); do
        if timeout 5 sinfo -h -n "$NODE" -o %t 2>/dev/null | grep -q -E '^(idle|mix|alloc)'; then
            configured=$(timeout 5 sinfo -h -n "$NODE" -o %c 2>/dev/null || true)
            if [ "$configured" = "$cpus" ]; then
                echo "local-slurm: node $NODE is up ($cpus CPUs); sbatch is ready"
            else  # the daemons were already running, started with another configuration
                echo "local-slurm: warning: node $NODE is up but the running Slurm gives it ${configured:-?} CPUs," \
                    "not $cpus; apply the new configuration with: bash $0 stop && bash $0 start" >&2
            fi
            return
        fi
        timeout 5 scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
        sleep 1
    done
    echo "local-slurm: the node did not come up; see $STATE/slurmctld.log and $STATE/slurmd.log" >&2
    timeout 5 sinfo >&2 || true
    exit 1
}

stop() {
    local daemon
    for daemon in slurmd slurmctld munged; do
        pkill -x "$daemon" 2>/dev/null || true
        for _ in $(seq 1 50); do  # wait until it is gone, so that a start right after sees it stopped
            pgrep -x "$daemon" >/dev/null || break
            sleep 0.2
        done
    done
    echo "local-slurm: stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) timeout 10 sinfo; timeout 10 squeue ;;
    cpus) cpu_count ;;
    *) echo "usage: $0 start|stop|status|cpus" >&2; exit 2 ;;
esac
