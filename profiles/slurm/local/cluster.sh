#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, so the slurm profile and the submitit launcher meet a real
# scheduler (docs/cluster.md):  cluster.sh up | down | status
#
# As root on Debian 12 (slurm-wlm 22.05): installs slurmctld, slurmd, slurmdbd, munge and MariaDB if
# missing, writes /etc/slurm/slurm.conf and slurmdbd.conf (never over a configuration it did not write),
# and starts the daemons directly: these machines have no systemd, and the configuration needs no cgroup
# plugin (proctrack/linuxproc, task/affinity). Accounting goes through slurmdbd and MariaDB because the
# Snakemake executor plugin and submitit ask `sacct`/`sacctmgr` about their jobs. Idempotent: `up` on a
# running cluster only checks it; `down` on a stopped one does nothing.
set -euo pipefail

CLUSTER=local
PARTITION=compute   # the partition profiles/slurm and conf/hydra/launcher/cluster.yaml ask for
ACCOUNT=harness
MARK="# written by tensor-kernel-harness profiles/slurm/local/cluster.sh"
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
LOGS=/var/log/slurm
PACKAGES=(slurmctld slurmd slurmdbd slurm-client munge mariadb-server)

say() { echo "cluster.sh: $*"; }
die() { echo "cluster.sh: $*" >&2; exit 1; }

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (it installs packages, writes /etc/slurm and starts daemons)"
}

install_packages() {
  local missing=()
  # installed means "install ok installed": `dpkg -s` also succeeds for a package removed with its
  # configuration kept (apt-get remove), whose programs are gone
  for p in "${PACKAGES[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
  done
  [ ${#missing[@]} = 0 ] && return
  command -v apt-get >/dev/null || die "no apt-get: install ${missing[*]} by hand"
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Write $2 to $1 unless a file we did not write is there (a real cluster's configuration stays untouched).
write_conf() {
  local path=$1 text=$2 mode=$3
  if [ -e "$path" ] && ! grep -qF "$MARK" "$path"; then
    die "$path exists and was not written by this script: not replacing it (move it away to use the local cluster)"
  fi
  printf '%s\n%s\n' "$MARK" "$text" >"$path.tmp"
  chown slurm:slurm "$path.tmp"
  chmod "$mode" "$path.tmp"
  mv "$path.tmp" "$path"
}

wait_for() {  # wait_for <what> <seconds> <command...>
  local what=$1 seconds=$2; shift 2
  for _ in $(seq "$((seconds * 4))"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  die "$what did not come up within ${seconds}s (logs in $LOGS and /var/log/mysql)"
}

start_munge() {
  pgrep -x munged >/dev/null && return
  [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key; chown munge:munge /etc/munge/munge.key; chmod 600 /etc/munge/munge.key; }
  install -d -o munge -g munge -m 755 /run/munge
  runuser -u munge -- /usr/sbin/munged
  wait_for munge 10 munge -n
}

start_mariadb() {
  if ! mariadb-admin ping >/dev/null 2>&1; then
    install -d -o mysql -g mysql -m 755 /run/mysqld
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql >/dev/null
    nohup /usr/sbin/mariadbd --user=mysql >/var/log/mysql-harness.log 2>&1 &
    wait_for MariaDB 60 mariadb-admin ping
  fi
  # slurmdbd's database and user; the password only guards a database on localhost
  mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmdbd-local';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
}

write_configs() {
  local host node
  host=$(hostname -s)
  # the node as slurmd sees it (CPUs, sockets, cores, memory)
  node=$(slurmd -C | head -1)
  install -d -o slurm -g slurm -m 755 /var/spool/slurmctld /var/spool/slurmd "$LOGS" /run/slurm
  write_conf "$DBD_CONF" "AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmdbd-local
StorageLoc=slurm_acct_db
LogFile=$LOGS/slurmdbd.log
PidFile=/run/slurm/slurmdbd.pid" 600
  write_conf "$CONF" "ClusterName=$CLUSTER
SlurmctldHost=$host
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
# no cgroup plugin: these machines have no systemd to delegate cgroups
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
MinJobAge=300
# SIGKILL 3 s after a cancel's or a time limit's SIGTERM (default 30 s): submitit's jobs ignore SIGTERM, so a
# cancelled job would otherwise go on measuring for half a minute
KillWait=3
$node State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP" 644
}

start_slurm() {
  if ! pgrep -x slurmdbd >/dev/null; then
    /usr/sbin/slurmdbd
    wait_for slurmdbd 30 sacctmgr -n show cluster
  fi
  sacctmgr -i -Q add cluster "$CLUSTER" >/dev/null 2>&1 || true
  pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
  wait_for slurmctld 30 scontrol ping
  pgrep -x slurmd >/dev/null || /usr/sbin/slurmd
  # an account for root and for whoever called sudo: the executor plugin submits under the user's account
  sacctmgr -i -Q add account "$ACCOUNT" Cluster="$CLUSTER" Description=harness Organization=harness >/dev/null 2>&1 || true
  for user in root ${SUDO_USER:-}; do
    sacctmgr -i -Q add user "$user" Account="$ACCOUNT" DefaultAccount="$ACCOUNT" >/dev/null 2>&1 || true
  done
  local host
  host=$(hostname -s)
  scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true
  wait_for "node $host" 30 bash -c "sinfo -h -n '$host' -o %t | grep -qE '^(idle|mix|alloc)'"
}

up() {
  need_root
  install_packages
  start_munge
  start_mariadb
  write_configs
  start_slurm
  say "up: $(sinfo -h -o '%P %D node(s) %c CPUs %m MB %t')"
}

stop_pid() {  # stop_pid <name> <pidfile>
  local pid
  pid=$(cat "$2" 2>/dev/null || pgrep -x "$1" || true)
  [ -n "$pid" ] || return 0
  kill $pid 2>/dev/null || true
  for _ in $(seq 80); do kill -0 $pid 2>/dev/null || return 0; sleep 0.25; done
  kill -9 $pid 2>/dev/null || true
}

down() {
  need_root
  stop_pid slurmd /run/slurm/slurmd.pid
  stop_pid slurmctld /run/slurm/slurmctld.pid
  stop_pid slurmdbd /run/slurm/slurmdbd.pid
  mariadb-admin shutdown >/dev/null 2>&1 || true
  stop_pid munged /run/munge/munged.pid
  say "down"
}

status() {
  for d in munged mariadbd slurmdbd slurmctld slurmd; do
    printf '%-10s %s\n' "$d" "$(pgrep -x $d >/dev/null && echo running || echo stopped)"
  done
  sinfo 2>/dev/null || true
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) die "usage: $0 up | down | status" ;;
esac
