"""The verdict engine: experiments as declarations, judged the same way every time.

One idea per module:
  declare    the declaration format (Experiment, Arm, Metric, Criterion, Case, Size) and
             its validation: what cannot be judged is a DesignError naming the field
  registry   design hashes, registered versions per size, the seed ledger, the log
  stats      readings over seeds (bootstrap interval of the mean, every seed)
  policy     the training policy: selection, the plateau rule, the budget rule
  judge      criteria, controls and both directions to verdicts per criterion and per claim
  run        train, measure, judge, write a result; record it under results/<name>/
  page       the generated page results/<name>/README.md
  records    result files (JSON, no pickle)
  figures    plotting helpers for a declaration's figure
  summary    one panel per trained claim (docs/img/claims.png) and the main job's report
  catalog    the declared experiments by name
  cli        python -m experiments.engine {run,register,page,check,claims,summary} ...

The method is stated once in docs/protocol.md.
"""
