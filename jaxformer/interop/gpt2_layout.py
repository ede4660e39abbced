"""The name and shape map between a GPT-2 state dict and the transformer rung's params.

Pure numpy, no I/O (jaxformer.interop.gpt2 reads and writes files). GPT-2 (Radford et al.
2019) is the `transformer` rung with pre-norm, a split skip, learned positions, biases,
a final layer norm and a tied output layer. Its Conv1D kernels are stored (in, out), the
same orientation as ours, so no transposes are needed; only heads are unpacked:

  h.{i}.attn.c_attn.weight  (D, 3D) = [Wq | Wk | Wv], head h in columns h*K:(h+1)*K
      -> mixer/scorer/wq, wk  and  mixer/valuer/wv, each (D, H, K)
  h.{i}.attn.c_proj.weight  (D, D), rows in the concatenated head order h*K + k
      -> mixer/valuer/wo (H, K, D)
  h.{i}.mlp.c_fc / c_proj   -> ffn/w1 (D, F), ffn/w2 (F, D)
  h.{i}.ln_1, ln_2, ln_f    -> norm1, norm2, final_norm (scale, bias)
  wte (V, D), wpe (max_len, D) -> embed, pos_embed;  lm_head (V, D) -> unembed (D, V) if untied
"""

import numpy as np

# Buffers some transformers versions keep in the state dict (the causal mask): not weights.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")
LM_HEAD = "lm_head.weight"


class GPT2FormatError(ValueError):
  """A GPT-2 state dict or config that cannot be mapped; the message names the tensor/field."""


def expected_shapes(dims, tied=True):
  """GPT-2 tensor name (without the 'transformer.' prefix) -> shape, for dims V, P, D, F, N."""
  V, P, D, F, N = (dims[k] for k in ("vocab", "positions", "width", "mlp", "layers"))
  shapes = {"wte.weight": (V, D), "wpe.weight": (P, D), "ln_f.weight": (D,), "ln_f.bias": (D,)}
  for i in range(N):
    h = f"h.{i}."
    for norm in ("ln_1", "ln_2"):
      shapes[h + norm + ".weight"] = (D,)
      shapes[h + norm + ".bias"] = (D,)
    shapes |= {
      h + "attn.c_attn.weight": (D, 3 * D),
      h + "attn.c_attn.bias": (3 * D,),
      h + "attn.c_proj.weight": (D, D),
      h + "attn.c_proj.bias": (D,),
      h + "mlp.c_fc.weight": (D, F),
      h + "mlp.c_fc.bias": (F,),
      h + "mlp.c_proj.weight": (F, D),
      h + "mlp.c_proj.bias": (D,),
    }
  if not tied:
    shapes[LM_HEAD] = (V, D)
  return shapes


def infer_dims(state):
  """V, P, D, F and the layer count from the tensors (heads cannot be inferred from shapes)."""
  for name in ("wte.weight", "wpe.weight", "h.0.mlp.c_fc.weight"):
    if name not in state:
      raise GPT2FormatError(f"missing tensor {name!r} (needed to infer the model's shape)")
    if np.ndim(state[name]) != 2:
      raise GPT2FormatError(f"tensor {name!r} has shape {np.shape(state[name])}, expected 2-D")
  layers = {int(k.split(".")[1]) for k in state if k.startswith("h.") and k.split(".")[1].isdigit()}
  vocab, width = np.shape(state["wte.weight"])
  return {
    "vocab": vocab,
    "positions": np.shape(state["wpe.weight"])[0],
    "width": width,
    "mlp": np.shape(state["h.0.mlp.c_fc.weight"])[1],
    "layers": max(layers) + 1,
  }


def check_state(state, dims, tied):
  """One error naming the first unknown, missing or wrongly shaped tensor."""
  want = expected_shapes(dims, tied)
  for name in state:
    if name not in want and name != LM_HEAD:
      raise GPT2FormatError(f"unknown tensor {name!r} in a GPT-2 state dict")
  for name, shape in want.items():
    if name not in state:
      raise GPT2FormatError(f"missing tensor {name!r} (expected shape {shape})")
    if tuple(np.shape(state[name])) != shape:
      raise GPT2FormatError(
        f"tensor {name!r} has shape {tuple(np.shape(state[name]))}, expected {shape}"
      )
  if LM_HEAD in state and np.shape(state[LM_HEAD]) != (dims["vocab"], dims["width"]):
    raise GPT2FormatError(
      f"tensor {LM_HEAD!r} has shape {np.shape(state[LM_HEAD])}, "
      f"expected {(dims['vocab'], dims['width'])}"
    )


def state_to_params(state, dims, num_heads, tied):
  """A checked, prefix-free float32 state dict -> the rung's plain params tree (numpy)."""
  D, H = dims["width"], num_heads
  K = D // H
  f32 = {k: np.asarray(v, np.float32) for k, v in state.items()}
  tree = {
    "embed": f32["wte.weight"],
    "pos_embed": f32["wpe.weight"],
    "final_norm": {"scale": f32["ln_f.weight"], "bias": f32["ln_f.bias"]},
  }
  if not tied:
    tree["unembed"] = np.ascontiguousarray(f32[LM_HEAD].T)
  for i in range(dims["layers"]):
    h = f"h.{i}."
    wq, wk, wv = np.split(f32[h + "attn.c_attn.weight"], 3, axis=1)
    bq, bk, bv = np.split(f32[h + "attn.c_attn.bias"], 3)
    tree[f"layers_{i}"] = {
      "norm1": {"scale": f32[h + "ln_1.weight"], "bias": f32[h + "ln_1.bias"]},
      "norm2": {"scale": f32[h + "ln_2.weight"], "bias": f32[h + "ln_2.bias"]},
      "mixer": {
        "scorer": {
          "wq": wq.reshape(D, H, K),
          "wk": wk.reshape(D, H, K),
          "bq": bq.reshape(H, K),
          "bk": bk.reshape(H, K),
        },
        "valuer": {
          "wv": wv.reshape(D, H, K),
          "bv": bv.reshape(H, K),
          "wo": f32[h + "attn.c_proj.weight"].reshape(H, K, D),
          "bo": f32[h + "attn.c_proj.bias"],
        },
      },
      "ffn": {
        "w1": f32[h + "mlp.c_fc.weight"],
        "b1": f32[h + "mlp.c_fc.bias"],
        "w2": f32[h + "mlp.c_proj.weight"],
        "b2": f32[h + "mlp.c_proj.bias"],
      },
    }
  return tree


def params_to_state(tree, num_layers):
  """The rung's plain params tree -> a prefix-free float32 GPT-2 state dict (numpy)."""

  def get(path):
    node = tree
    for key in path.split("/"):
      if not isinstance(node, dict) or key not in node:
        raise GPT2FormatError(f"params are missing {path!r}")
      node = node[key]
    return np.asarray(node, np.float32)

  state = {
    "wte.weight": get("embed"),
    "wpe.weight": get("pos_embed"),
    "ln_f.weight": get("final_norm/scale"),
    "ln_f.bias": get("final_norm/bias"),
  }
  if "unembed" in tree:
    state[LM_HEAD] = get("unembed").T
  for i in range(num_layers):
    p, h = f"layers_{i}/", f"h.{i}."
    s, v = p + "mixer/scorer/", p + "mixer/valuer/"
    D = get(s + "wq").shape[0]
    state |= {
      h + "ln_1.weight": get(p + "norm1/scale"),
      h + "ln_1.bias": get(p + "norm1/bias"),
      h + "ln_2.weight": get(p + "norm2/scale"),
      h + "ln_2.bias": get(p + "norm2/bias"),
      h + "attn.c_attn.weight": np.concatenate(
        [get(s + "wq").reshape(D, -1), get(s + "wk").reshape(D, -1), get(v + "wv").reshape(D, -1)],
        axis=1,
      ),
      h + "attn.c_attn.bias": np.concatenate(
        [get(s + "bq").ravel(), get(s + "bk").ravel(), get(v + "bv").ravel()]
      ),
      h + "attn.c_proj.weight": get(v + "wo").reshape(-1, D),
      h + "attn.c_proj.bias": get(v + "bo"),
      h + "mlp.c_fc.weight": get(p + "ffn/w1"),
      h + "mlp.c_fc.bias": get(p + "ffn/b1"),
      h + "mlp.c_proj.weight": get(p + "ffn/w2"),
      h + "mlp.c_proj.bias": get(p + "ffn/b2"),
    }
  return {k: np.ascontiguousarray(a) for k, a in state.items()}
