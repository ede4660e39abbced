"""A GPT-2 forward pass in plain numpy, written from the GPT-2 equations (Radford et al.
2019) over a Hugging Face state dict: the reference for tests that run without torch."""

import numpy as np


def random_state(rng, vocab, positions, width, layers, mlp=None, untied=False, prefix=True):
  """A GPT2LMHeadModel-style state dict of random float32 arrays (norms and biases too)."""
  mlp = 4 * width if mlp is None else mlp
  shapes = {"wte.weight": (vocab, width), "wpe.weight": (positions, width)}
  for i in range(layers):
    h = f"h.{i}."
    shapes |= {h + "ln_1.weight": (width,), h + "ln_1.bias": (width,)}
    shapes |= {h + "attn.c_attn.weight": (width, 3 * width), h + "attn.c_attn.bias": (3 * width,)}
    shapes |= {h + "attn.c_proj.weight": (width, width), h + "attn.c_proj.bias": (width,)}
    shapes |= {h + "ln_2.weight": (width,), h + "ln_2.bias": (width,)}
    shapes |= {h + "mlp.c_fc.weight": (width, mlp), h + "mlp.c_fc.bias": (mlp,)}
    shapes |= {h + "mlp.c_proj.weight": (mlp, width), h + "mlp.c_proj.bias": (width,)}
  shapes |= {"ln_f.weight": (width,), "ln_f.bias": (width,)}
  state = {}
  for name, shape in shapes.items():
    value = 0.15 * rng.standard_normal(shape)
    if name.endswith("weight") and ("ln_" in name):
      value += 1.0
    state[("transformer." if prefix else "") + name] = value.astype(np.float32)
  wte = state[("transformer." if prefix else "") + "wte.weight"]
  state["lm_head.weight"] = (
    (0.15 * rng.standard_normal(wte.shape)).astype(np.float32) if untied else wte
  )
  return state


def _ln(x, w, b, eps=1e-5):
  mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * w + b


def _gelu_new(x):
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def logits(state, num_heads, tokens_BL, scale=True):
  """GPT2LMHeadModel(tokens).logits, in float64."""
  s = {k.removeprefix("transformer."): np.asarray(v, np.float64) for k, v in state.items()}
  batch, length = tokens_BL.shape
  x = s["wte.weight"][tokens_BL] + s["wpe.weight"][:length]
  layers = len({k.split(".")[1] for k in s if k.startswith("h.")})
  future = np.triu(np.ones((length, length), bool), 1)
  for i in range(layers):
    p = lambda n, i=i: s[f"h.{i}.{n}"]  # noqa: E731
    h = _ln(x, p("ln_1.weight"), p("ln_1.bias"))
    q, k, v = np.split(h @ p("attn.c_attn.weight") + p("attn.c_attn.bias"), 3, axis=-1)
    q, k, v = (t.reshape(batch, length, num_heads, -1).transpose(0, 2, 1, 3) for t in (q, k, v))
    att = q @ k.transpose(0, 1, 3, 2) / (np.sqrt(q.shape[-1]) if scale else 1.0)
    att = np.exp(np.where(future, -np.inf, att) - att.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    o = (att @ v).transpose(0, 2, 1, 3).reshape(batch, length, -1)
    x = x + o @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
    h = _ln(x, p("ln_2.weight"), p("ln_2.bias"))
    h = _gelu_new(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"))
    x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
  x = _ln(x, s["ln_f.weight"], s["ln_f.bias"])
  return x @ s.get("lm_head.weight", s["wte.weight"]).T
