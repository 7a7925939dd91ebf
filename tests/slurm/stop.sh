#!/usr/bin/env bash
# Stop the cluster tests/slurm/start.sh DIR started (its daemons, by their pid files under DIR/run).
dir=$(realpath -m "$1")
for name in slurmd slurmctld slurmdbd mysql munged; do
  pidfile="$dir/run/$name.pid"
  [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
done
for _ in $(seq 50); do
  alive=0
  for name in slurmd slurmctld slurmdbd mysql munged; do
    pidfile="$dir/run/$name.pid"
    [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && alive=1
  done
  [ $alive = 0 ] && break
  sleep 0.2
done
exit 0
