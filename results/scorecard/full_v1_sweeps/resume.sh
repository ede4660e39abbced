#!/bin/bash
# Resumes the scorecard's full v1 run on this machine (run from main's root, /work/main):
# the pinned clone, its store filled from the sweeps committed here, then pack_run.py until
# MINUTES (default 160) from now. Log: /work/sc/pack.log.
set -euo pipefail
MINUTES=${1:-160}
HERE=results/scorecard/full_v1_sweeps
SC=/work/sc
mkdir -p $SC/full_v1_work/sweeps
[ -d $SC/full_v1 ] || { git clone -q . $SC/full_v1 && git -C $SC/full_v1 checkout -q ac4b681; }
[ "$(git -C $SC/full_v1 rev-parse --short HEAD)" = ac4b681 ] || { echo "clone not at ac4b681"; exit 1; }
for d in $HERE/*/; do
  k=$(basename $d); [ -d $SC/full_v1_work/sweeps/$k ] || cp -r $d $SC/full_v1_work/sweeps/$k
done
[ -f $SC/packed_done.txt ] || cp $HERE/units_done.txt $SC/packed_done.txt
cp $HERE/pack_run.py $HERE/pack_unit.py $HERE/persist.sh $SC/
make .venv/.installed >/dev/null
nohup .venv/bin/python $SC/pack_run.py $(( $(date +%s) + MINUTES * 60 )) >> $SC/pack.log 2>&1 &
# every 5 minutes while the scheduler runs: a unit's finished stage (its exploratory sweep) is
# kept too, should the session end before the unit does
nohup bash -c "while kill -0 $! 2>/dev/null; do sleep 300; $SC/persist.sh; done" \
  >> $SC/persist.log 2>&1 &
echo "started; units done: $(wc -l < $SC/packed_done.txt) of 23; log $SC/pack.log"
