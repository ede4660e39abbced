"""Schedules the scorecard full v1's units, longest that fits before the deadline first, on
two cores, each unit a subprocess of pack_unit.py in the pinned clone. argv: deadline (epoch s)"""
import os
import subprocess
import sys
import time

CLONE, WORK = "/work/sc/full_v1", "/work/sc/full_v1_work"
PY = "/work/main/.venv/bin/python"
DONE = "/work/sc/packed_done.txt"
# rough core-minutes per unit on this machine (exploratory + confirmatory stages); measured so far
# 0.64-1.07 of these but gla_16 (87 for 62): gla_4 raised from 39 to 55 by that ratio
EST = {"softmax": 42, "sliding_window_4": 35, "sliding_window_16": 35, "linear_4": 30,
       "linear_16": 45, "gated_4": 50, "gated_16": 60, "mamba2_4": 64, "mamba2_16": 63,
       "gated_deltanet_4": 70, "gated_deltanet_16": 100, "gla_4": 55, "gla_16": 62,
       "hybrid_4": 56, "hybrid_16": 59, "retnet_4": 28, "retnet_16": 38, "deltanet_4": 58,
       "deltanet_16": 30, "based_2": 54, "based_8": 39, "h3_2": 58, "h3_8": 59}
SLACK = float(os.environ.get("SLACK", "1.0"))


def names():
  out = subprocess.run([PY, "-c", "from experiments import s9_scorecard as s;"
                        "print(' '.join(a.name for a in s.EXPERIMENT.arms))"], cwd=CLONE,
                       env=os.environ | {"PYTHONPATH": "."}, capture_output=True, text=True,
                       check=True).stdout.split()
  return out


def main():
  deadline = float(sys.argv[1])
  arms = names()
  assert set(arms) == set(EST), (arms, EST)
  done = set(open(DONE).read().split()) if os.path.exists(DONE) else set()
  running = {}  # core -> (name, proc, start)
  os.makedirs(WORK, exist_ok=True)
  while True:
    for core, (name, proc, start) in list(running.items()):
      if proc.poll() is not None:
        del running[core]
        mins = (time.time() - start) / 60
        print(f"{time.strftime('%H:%M')} {name} exit {proc.returncode} {mins:.0f} min", flush=True)
        if proc.returncode == 0:
          done.add(name)
          with open(DONE, "a") as f:
            f.write(name + "\n")
          subprocess.run(["/work/sc/persist.sh"], check=False)
    busy = {n for n, _, _ in running.values()}
    left = sorted((a for a in arms if a not in done and a not in busy), key=lambda a: -EST[a])
    for core in (0, 1):
      if core in running:
        continue
      fits = [a for a in left if time.time() + EST[a] * SLACK * 60 < deadline]
      if not fits:
        continue
      name = fits[0]
      left.remove(name)
      log = open(f"/work/sc/unit_{name}.log", "a")
      proc = subprocess.Popen([PY, "/work/sc/pack_unit.py", str(arms.index(name)), str(core), WORK],
                              cwd=CLONE, env=os.environ | {"PYTHONPATH": "."}, stdout=log,
                              stderr=subprocess.STDOUT)
      running[core] = (name, proc, time.time())
      print(f"{time.strftime('%H:%M')} start {name} on core {core} (est {EST[name]} min)", flush=True)
    if not running:
      print(f"{time.strftime('%H:%M')} nothing running, nothing fits; {len(done)} done", flush=True)
      return
    time.sleep(20)


if __name__ == "__main__":
  main()
