#!/bin/bash
# Copies the pinned run's finished sweeps into main and commits them there alone, so a fresh
# machine resumes from them (results/scorecard/full_v1_sweeps/README.md).
STORE=/work/sc/full_v1_work/sweeps
DEST=/work/main/results/scorecard/full_v1_sweeps
mkdir -p $DEST
new=0
for d in $STORE/*/; do
  k=$(basename $d)
  [[ $k =~ ^[0-9a-f]{32}$ ]] || continue
  [ -f $d/sweep.json ] || continue
  [ -d $DEST/$k ] && continue
  cp -r $d $DEST/$k.tmp && mv $DEST/$k.tmp $DEST/$k && new=$((new+1))
done
[ $new -gt 0 ] || exit 0
cd /work/main
touch /work/sc/packed_done.txt; cp /work/sc/packed_done.txt $DEST/units_done.txt; units=$(tr "\n" " " < /work/sc/packed_done.txt)
for i in 1 2 3; do
  git add -- results/scorecard/full_v1_sweeps && \
  git commit -q -m "Scorecard full v1 (in progress): $new finished sweeps of the pinned run (ac4b681) kept in results/scorecard/full_v1_sweeps so it resumes on a fresh machine; units stored: $units" -- results/scorecard/full_v1_sweeps && break
  sleep 5
done
