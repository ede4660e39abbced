#!/bin/bash
# Copies the pinned run's finished sweeps into main and commits them there alone, so a fresh
# machine resumes from them (results/scorecard/full_v1_sweeps/README.md).
exec 9>/work/sc/persist.lock && flock 9  # one at a time: the scheduler's and the 5-minute loop's
STORE=/work/sc/full_v1_work/sweeps
DEST=/work/main/results/scorecard/full_v1_sweeps
mkdir -p $DEST
new=0 added=()
for d in $STORE/*/; do
  k=$(basename $d)
  [[ $k =~ ^[0-9a-f]{32}$ ]] || continue
  [ -f $d/sweep.json ] || continue
  git -C /work/main cat-file -e HEAD:results/scorecard/full_v1_sweeps/$k/sweep.json 2>/dev/null && continue
  [ -d $DEST/$k ] || { cp -r $d $DEST/$k.tmp && mv $DEST/$k.tmp $DEST/$k; }
  new=$((new+1)) added+=(results/scorecard/full_v1_sweeps/$k)
done
[ $new -gt 0 ] || exit 0
cd /work/main
touch /work/sc/packed_done.txt; cp /work/sc/packed_done.txt $DEST/units_done.txt; units=$(tr "\n" " " < /work/sc/packed_done.txt)
for i in 1 2 3; do
  paths=("${added[@]}" results/scorecard/full_v1_sweeps/units_done.txt)  # never the folder:
  git add -- "${paths[@]}" && \
  git commit -q -m "Scorecard full v1 (in progress): $new finished sweeps of the pinned run (ac4b681) kept in results/scorecard/full_v1_sweeps so it resumes on a fresh machine; units stored: $units" -- "${paths[@]}" && break
  sleep 5
done
