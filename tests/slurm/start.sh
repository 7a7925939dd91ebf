#!/usr/bin/env bash
# Start a single-node Slurm cluster on this machine, as root, with its state, logs and config under DIR:
# munged, MariaDB (for slurmdbd), slurmdbd, slurmctld and slurmd on localhost, one node with this machine's CPUs,
# one partition ("debug"). Prints the line SLURM_CONF=DIR/slurm.conf to export for the client commands.
# usage: bash tests/slurm/start.sh DIR       stop: bash tests/slurm/stop.sh DIR
set -euo pipefail
dir=$(realpath -m "$1")
mkdir -p "$dir"/{state,spool,mysql,run}
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # the machine's CPUs: nproc counts OMP_NUM_THREADS's (conftest.py's 1)
pass=ppo-test-$RANDOM$RANDOM

# munge: the key the package installed, on its usual socket (/run/munge)
mkdir -p /run/munge
munged --force --pid-file="$dir/run/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/run/munge.seed"

# MariaDB on a socket and a loopback port of its own, for slurmdbd's accounting
mariadb-install-db --user=root --datadir="$dir/mysql" --auth-root-authentication-method=socket >"$dir/mysql-install.log" 2>&1
mariadbd --user=root --datadir="$dir/mysql" --socket="$dir/run/mysql.sock" --port=3307 --bind-address=127.0.0.1 \
  --pid-file="$dir/run/mysql.pid" --log-error="$dir/mysql.log" >/dev/null 2>&1 &
for _ in $(seq 100); do [ -S "$dir/run/mysql.sock" ] && break; sleep 0.2; done
mariadb -S "$dir/run/mysql.sock" -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db; CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"

cat >"$dir/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6919
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3307
StorageUser=slurm
StoragePass=$pass
StorageLoc=slurm_acct_db
PidFile=$dir/run/slurmdbd.pid
LogFile=$dir/slurmdbd.log
CONF
chmod 600 "$dir/slurmdbd.conf"

cat >"$dir/slurm.conf" <<CONF
ClusterName=ppotest
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=6917
SlurmdPort=6918
ReturnToService=2
KillWait=30
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6919
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$dir/slurm.conf
slurmdbd  # reads slurmdbd.conf next to $SLURM_CONF
for _ in $(seq 100); do timeout 5 sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done
sacctmgr -i add cluster ppotest >/dev/null 2>&1 || true
slurmctld
slurmd -N localhost
for _ in $(seq 150); do timeout 5 sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 0.2; done
timeout 5 sinfo -h -o %T 2>/dev/null | grep -q idle || { echo "error: the Slurm node did not come up; see $dir/*.log" >&2; exit 1; }
echo "SLURM_CONF=$dir/slurm.conf"
