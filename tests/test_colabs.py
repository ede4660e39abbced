"""Every notebook in colabs/ executes headless at a small size and computes real values.

Each notebook is stored without outputs and has exactly one cell tagged `parameters`
(papermill's convention). The test appends small overrides to that cell, runs the notebook
with nbclient in the repository root, then runs one extra cell that prints a JSON line of
values the notebook computed, and checks them: a notebook that silently does nothing fails.
"""

import ast
import json
import os
import re
import resource
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests import XLA_TEST_FLAGS

REPO_ROOT = Path(__file__).resolve().parents[1]
COLABS = REPO_ROOT / "colabs"
MARK = "COLAB_CHECK "
CELL_TIMEOUT_S = 300

# Small sizes shared by the notebooks that train: one layer, a few steps, a small split.
SMALL_TASK = "mqar:vocab_size=32,seq_len=16,num_kv_pairs=2,num_examples=256,num_test_examples=64"
SMALL_TRAIN = {
  "TASK": SMALL_TASK,
  "D_MODEL": 32,
  "NUM_LAYERS": 1,
  "BATCH_SIZE": 16,
  "TOTAL_STEPS": 12,
  "EVAL_EVERY": 6,
}


# Defined in the kernel before each probe expression runs.
PROBE_PRELUDE = """
import json

import numpy as np


def _one_row_for_all(w_LM):
  # True when every causal softmax row is the last row's prefix renormalized (one score per source)
  w_LM = np.asarray(w_LM, np.float64)
  shared_LM = np.tril(np.broadcast_to(w_LM[-1], w_LM.shape))
  return bool(np.allclose(w_LM, shared_LM / shared_LM.sum(-1, keepdims=True), atol=1e-5))


"""


def _evals(name):
  return f"[list(map(float, e)) for e in results[{name!r}]['evals']]"


# notebook -> (parameter overrides, expression printed as JSON, check of the parsed value)
CASES = {
  "00_tour": (
    SMALL_TRAIN | {"COMPARE": {"rnn": ("rnn", {}), "transformer": ("transformer", {})}},
    "{'counts': counts,"
    " 'evals': {r: [list(map(float, e)) for e in s['evals']] for r, s in results.items()}}",
    lambda v: (
      set(v["counts"]) == set(_rungs())
      and all(n > 0 for n in v["counts"].values())
      and v["counts"]["full_dynamic"] != v["counts"]["transformer"]
      and all([e[0] for e in ev] == [6, 12] for ev in v["evals"].values())
      and all(0 <= e[2] <= 1 and e[1] > 0 for ev in v["evals"].values() for e in ev)
    ),
  ),
  "01_fixed_memory_and_parallelism": (
    {k: v for k, v in SMALL_TRAIN.items() if k != "TASK"}
    | {
      "VOCAB": 32,
      "GRID": ((2, 8),),
      "NUM_EXAMPLES": 256,
      "RUNS": {"lstm": ("rnn", {"cell": "lstm"}), "rnn_attention": ("rnn_attention", {})},
      "LENGTHS": (4, 8, 16),
    },
    "{'recurrent': recurrent, 'parallel': parallel, 'evals': " + _evals("rnn_attention") + ","
    " 'map_rows': a_HLM.sum(-1).tolist()}",
    # 2 layers: L + 1 dependent steps with recurrence, 2 without (docs/reconstruction.md, step 2);
    # NUM_LAYERS is 1 here: L and 1.
    lambda v: (
      v["recurrent"] == [4, 8, 16]
      and v["parallel"] == [1, 1, 1]
      and [e[0] for e in v["evals"]] == [6, 12]
      and all(abs(s - 1) < 1e-4 for row in v["map_rows"] for s in row)  # softmax rows
    ),
  ),
  "02_dynamic_weights_and_symmetry": (
    SMALL_TRAIN | {"RUNGS": ("source_only", "matrix_sum"), "MAX_OFFSET": 3},
    "{r: s.tolist() for r, s in sims.items()} | {'evals': " + _evals("matrix_sum") + ","
    " 'shared': {r: _one_row_for_all(w) for r, w in weights.items()}}",
    lambda v: (
      all(len(v[r]) == 3 and all(-1 <= s <= 1 for s in v[r]) for r in ("source_only", "matrix_sum"))
      # W_iL = f(x_i): every receiver's softmax row is the last row's prefix, renormalized;
      # with f(x_i, x_L) it is not
      and v["shared"] == {"source_only": True, "matrix_sum": False}
      and set(v) == {"source_only", "matrix_sum", "evals", "shared"}
      and [e[0] for e in v["evals"]] == [6, 12]
    ),
  ),
  "03_queries_keys_and_cache": (
    SMALL_TRAIN | {"INTERACTIONS": ("additive", "lowrank"), "CACHE_LENGTHS": (4, 8), "GRID": 21},
    "{'gap': lowrank_vs_bilinear, 'article': article_bytes, 'measured': measured,"
    " 'predicted': predicted, 'evals': " + _evals("lowrank") + "}",
    lambda v: (
      v["gap"] < 1e-3
      and v["article"] == {"bilinear": 10_000_000_000, "lowrank": 2_000_000_000}
      and v["measured"] == v["predicted"]
      and v["measured"]["lowrank"][1] == 2 * v["measured"]["lowrank"][0] > 0
      and [e[0] for e in v["evals"]] == [6, 12]
    ),
  ),
  "04_softmax_heads_and_wo": (
    SMALL_TRAIN | {"RUNS": {"softmax": ("softmax", {})}, "RANKS": (4, 8), "CACHE_LENGTH": 8},
    "{'gaps': gaps, 'concat_vs_sum': concat_vs_sum, 'concat': concat, 'summed': summed,"
    " 'evals': " + _evals("softmax") + "}",
    lambda v: (
      all(g < 1e-4 for g in v["gaps"].values())
      and set(v["gaps"]) == {"none", "sum", "softmax"}
      and v["concat_vs_sum"] < 1e-5
      # values of rank r: tokens x layers x heads x r x 4 bytes; D = 32, 2 heads, 1 layer
      and v["concat"] == [8 * 1 * 2 * 4 * 4, 8 * 1 * 2 * 8 * 4]
      and v["summed"] == 8 * 1 * 2 * 32 * 4
      and [e[0] for e in v["evals"]] == [6, 12]
    ),
  ),
  "05_mlp_as_memory": (
    {k: v for k, v in SMALL_TRAIN.items() if k != "TASK"}
    | {
      "CORPUS": "jaxformer/math/*.py",
      "SEQ_LEN": 32,
      "STRIDE": 32,
      "RUNS": {"transformer (split skip + LN)": ("transformer", {})},
      "D_FF": 64,
      "PROBE_SEQUENCES": 16,
      "TOP_K": 3,
      "UNITS_SHOWN": 2,
    },
    "{'gap': memory_gap, 'shape': list(report['activations'].shape),"
    " 'positions': report['position'].tolist(),"
    " 'evals': " + _evals("transformer (split skip + LN)") + "}",
    lambda v: (
      v["gap"] < 1e-3
      and v["shape"] == [64, 3]
      and all(0 <= p < 32 for row in v["positions"] for p in row)
      and [e[0] for e in v["evals"]] == [6, 12]
    ),
  ),
  "06_beyond_quadratic": (
    {
      "MASK_LENGTH": 16,
      "CHECK_SHAPE": (1, 32, 2, 8),
      "BENCH_LENGTHS": (32, 64),
      "BENCH_IMPLS": ("dense", "blockwise"),
      "BENCH_BLOCK": 16,
      "BENCH_REPEATS": 1,
      "NEEDLE_DISTANCES": (4,),
      "NEEDLE_SPEC": "needle:vocab_size=32,seq_len=16,num_examples=256,num_test_examples=64",
      "D_MODEL": 32,
      "NUM_LAYERS": 1,
      "BATCH_SIZE": 16,
      "TOTAL_STEPS": 8,
      "EVAL_EVERY": 8,
    },
    "{'gaps': gaps, 'needle': needle,"
    " 'bench': [(r['impl'], r['L'], r['peak_bytes'], r['time_s']) for r in rows]}",
    lambda v: (
      all(
        v["gaps"][k] < 1e-4
        for k in (
          "dot_product - dense",
          "blockwise - dense",
          "sliding_window - dense (same window)",
        )
      )
      and v["gaps"]["linear - linear_recurrent"] < 1e-3
      and v["gaps"]["linear - dense"] > 1e-3  # a different function, by design
      and all(len(a) == 1 and 0 <= a[0] <= 1 for a in v["needle"].values())
      and [b[:2] for b in v["bench"]]
      == [["dense", 32], ["blockwise", 32], ["dense", 64], ["blockwise", 64]]
      and all(b[2] > 0 and b[3] > 0 for b in v["bench"])
    ),
  ),
  "07_sharding": (
    {
      "D_MODEL": 32,
      "NUM_LAYERS": 1,
      "BATCH_SIZE": 16,
      "STEPS": 3,
      "CLI_STEPS": 2,
      "TASK": SMALL_TASK,
    },
    "{'devices': jax.device_count(), 'loss_gap': loss_gap, 'param_gap': param_gap,"
    " 'losses': single_losses.tolist(), 'mesh': dict(mesh.shape), 'cli': cli.returncode,"
    " 'cli_summary': cli_summary}",
    lambda v: (
      v["devices"] == 8
      and v["mesh"] == {"data": 2, "fsdp": 2, "tensor": 2}
      and v["loss_gap"] < 1e-5
      and v["param_gap"] < 1e-5
      and len(v["losses"]) == 3
      and v["losses"][-1] < v["losses"][0]
      # the closing command: experiments.main on the same mesh, in its own process
      and v["cli"] == 0
      and v["cli_summary"].startswith("completed at step 2, eval_loss=")
    ),
  ),
  "08_gpt2_circuits": (
    {
      # not on the hub offline (HF_HUB_OFFLINE below): the notebook falls back to a random GPT-2
      "GPT2_SOURCE": "jaxformer-tests/no-such-gpt2",
      "RANDOM_GPT2": {
        "n_layer": 2,
        "n_embd": 32,
        "n_head": 4,
        "n_positions": 64,
        "vocab_size": 256,
      },
      "PROBE_WINDOW": 16,
      "PROBE_SEQUENCES": 8,
      "TOP_K": 3,
      "UNITS_SHOWN": 2,
      # a few steps: too few for an induction head; the check is the patching arithmetic
      "INDUCTION_TASK": "induction:vocab_size=16,seq_len=16,num_examples=256,num_test_examples=64",
      "INDUCTION_MODEL": {"d_model": 32, "num_layers": 2, "num_heads": 2, "d_ff": 64},
      "INDUCTION_STEPS": 4,
    },
    "{'origin': origin, 'logit_gap': logit_gap, 'resid_gap': resid_gap, 'qk_gap': qk_gap,"
    " 'ov_gap': ov_gap, 'ranks': {k: list(v.shape) for k, v in ranks.items()},"
    " 'probe': list(report['activations'].shape), 'units': len(units),"
    " 'scores': scores.tolist(), 'heads': [[int(ind_layer), int(ind_head)],"
    " [int(rand_layer), int(rand_head)]], 'acc': [base_acc, ind_acc, rand_acc, corrupt_acc,"
    " patched_acc, all_patched_acc, set_acc, set_patched_acc],"
    " 'induction_heads': [list(h) for h in induction_heads]}",
    lambda v: (
      v["origin"] == "random"
      and max(v["logit_gap"], v["resid_gap"], v["qk_gap"], v["ov_gap"]) < 1e-4
      and v["ranks"] == {"qk": [2, 4], "ov": [2, 4]}
      and v["probe"] == [4 * 32, 3]  # F = 4 D units, TOP_K contexts each
      and v["units"] == 2
      and len(v["scores"]) == 2
      and all(len(r) == 2 and 0 < min(r) for r in v["scores"])
      and v["scores"][v["heads"][0][0]][v["heads"][0][1]] == max(map(max, v["scores"]))
      and v["heads"][0] != v["heads"][1]
      and all(0 <= a <= 1 for a in v["acc"])
      and v["acc"][5] == v["acc"][0]  # every activation patched back: the clean run
      and all(v["scores"][l][h] > 0.5 for l, h in v["induction_heads"])
    ),
  ),
}


def _children_cpu_seconds():
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the kernel, once it has exited
  return usage.ru_utime + usage.ru_stime


def _rungs():
  from jaxformer import ladder

  return ladder.RUNGS


def _read(name):
  return nbformat.read(COLABS / f"{name}.ipynb", as_version=4)


def _parameters_cell(nb):
  cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
  assert len(cells) == 1, f"expected one cell tagged 'parameters', found {len(cells)}"
  return cells[0]


def _assigned_names(source):
  return {
    t.id for node in ast.parse(source).body if isinstance(node, ast.Assign) for t in node.targets
  }


def test_every_notebook_has_a_case():
  assert sorted(p.stem for p in COLABS.glob("*.ipynb")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_stored_without_outputs(name):
  nb = _read(name)
  nbformat.validate(nb)
  for cell in nb.cells:
    if cell.cell_type == "code":
      assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
  params = _parameters_cell(nb)
  assert set(CASES[name][0]) <= _assigned_names(params.source)
  # the install cell installs only when jaxformer is missing
  install = next(c for c in nb.cells if "pip" in c.source)
  assert 'find_spec("jaxformer") is None' in install.source


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("colab_data"))


# Executing a notebook costs 10-25 s of CPU each: `make test` executes the tour; `make
# test-slow` runs all (07_sharding, the dearest at ~27 s, calls training internals that
# tests/train covers).
EXECUTED_IN_MAKE_TEST = ("00_tour",)
EXECUTIONS = [
  pytest.param(n, marks=() if n in EXECUTED_IN_MAKE_TEST else pytest.mark.slow)
  for n in sorted(CASES)
]


@pytest.mark.parametrize("name", EXECUTIONS)
def test_executes(name, data_dir):
  overrides, probe, check = CASES[name]
  nb = _read(name)
  params = _parameters_cell(nb)
  params.source += "\n# test overrides\n" + "\n".join(f"{k} = {v!r}" for k, v in overrides.items())
  nb.cells.append(
    nbformat.v4.new_code_cell(PROBE_PRELUDE + f"print({MARK!r} + json.dumps({probe}))")
  )
  env = dict(os.environ)
  # one CPU device, as a Colab CPU runtime (07 adds its own device count), and the tests' flags
  env["XLA_FLAGS"] = XLA_TEST_FLAGS
  env.update(
    JAX_PLATFORMS="cpu",
    JAXFORMER_DATA_DIR=data_dir,
    MPLBACKEND="module://matplotlib_inline.backend_inline",
    HF_HUB_OFFLINE="1",  # 08 must not download GPT-2 in a test
    PYTHONPATH=os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]),
  )
  client = NotebookClient(
    nb,
    kernel_name="python3",
    timeout=CELL_TIMEOUT_S,
    resources={"metadata": {"path": str(REPO_ROOT)}},
  )
  start, cpu_start = time.perf_counter(), _children_cpu_seconds()
  client.execute(env=env)
  seconds, cpu = time.perf_counter() - start, _children_cpu_seconds() - cpu_start
  print(f"{name}: executed in {seconds:.1f} s wall, {cpu:.1f} s kernel CPU", file=sys.stderr)

  lines = [
    line
    for output in nb.cells[-1].outputs
    if output.get("name") == "stdout"
    for line in output["text"].splitlines()
    if line.startswith(MARK)
  ]
  assert len(lines) == 1, nb.cells[-1].outputs
  value = json.loads(lines[0][len(MARK) :])
  assert check(value), value
  # each cell that renders verdicts of record from results/ shows every claim it names
  for cell in nb.cells:
    if "verdicts.markdown(" in cell.source:
      shown = "".join(o.get("data", {}).get("text/markdown", "") for o in cell.outputs)
      numbers = re.findall(r'"(\d+\.\d+)"', cell.source)
      assert numbers and all(f"- **{n}**" in shown for n in numbers), (cell.source, shown)
