"""One unit of the registered scorecard full v1 into the pinned clone's sweep store
(the pinned engine's own run._train_one: same store, same keys). argv: index core workdir"""
import os
import sys
import time

if __name__ == "__main__":
  index, core, workdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
  os.sched_setaffinity(0, {core})
  from experiments import s9_scorecard as sc
  from experiments.engine import registry, run

  exp = sc.EXPERIMENT
  entry = registry.entry(exp, "full")
  seeds = run.seed_order(exp, "full", entry)
  t = time.time()
  key, _ = run._train_one(exp, "full", seeds, workdir, index)
  print(f"PACK_DONE {key[0]} {time.time() - t:.0f}s", flush=True)
