#!/bin/bash
# Files the scorecard's full v1 record once units_done.txt names all 23 (README.md here), from
# main's root, after `resume.sh 0` has rebuilt the pinned clone and its store (it starts no
# unit then): the pinned engine's --record run reads every unit back and writes the clone's
# record, figure, page and log line; the record, the figure and the new log lines go to main;
# then main's page and summary. What is left by hand: the README's scorecard figure and
# paragraph, `git rm -r` of this folder, the tests, the commit.
set -euo pipefail
HERE=results/scorecard/full_v1_sweeps
CLONE=/work/sc/full_v1
WORK=/work/sc/full_v1_work
n=$(sort -u $HERE/units_done.txt | wc -l)
[ "$n" = 23 ] || { echo "only $n of 23 units stored: not yet"; exit 1; }
[ "$(git -C $CLONE rev-parse --short HEAD)" = ac4b681 ] || { echo "no clone at ac4b681 (resume.sh 0)"; exit 1; }
for d in $HERE/*/; do
  [ -f $WORK/sweeps/$(basename $d)/sweep.json ] || { echo "store lacks $(basename $d) (resume.sh 0)"; exit 1; }
done
before=$(wc -l < $CLONE/results/scorecard/log.md)
(cd $CLONE && PYTHONPATH=. /work/main/.venv/bin/python -m experiments.engine run scorecard \
  --size full --workdir $WORK --record)
cp $CLONE/results/scorecard/full.json $CLONE/results/scorecard/scorecard_full.png results/scorecard/
tail -n +$((before + 1)) $CLONE/results/scorecard/log.md >> results/scorecard/log.md
.venv/bin/python -m experiments.engine page scorecard
.venv/bin/python -m experiments.engine summary
# the record's per-unit seconds read ~0 (read back): the run's real cost is in the sweeps
.venv/bin/python - <<'EOF'
import glob, json
s = [json.load(open(p)) for p in glob.glob("results/scorecard/full_v1_sweeps/*/sweep.json")]
total = sum(x["compile_seconds"] + x["train_seconds"] for x in s)
print(f"{len(s)} sweeps: {total / 3600:.1f} core-hours of compiling and training")
EOF
