"""Sequence mixers that plug into the transformer's block: the scorecard's candidates.

A sequence mixer is a flax.linen Module built as `Class(width=D, **fields)` that maps
x_BLD [B, L, D] -> [B, L, D] causally; it may take `decode=True` and keep its decoding state
in the 'cache' collection (as jaxformer.nn.mixer.Mixer does). The ladder's `custom` rung
puts one in the transformer's block (pre-norm, split skip, MLP, embeddings), so compared
mixers differ in the mixer alone:

  config = ladder.default_config("custom")
  config.mixer = "jaxformer.mixers.gated:GatedRecurrence"     # or "path/to/file.py:Class"
  config.mixer_fields = '{"num_heads": 4}'                    # JSON: the class's own fields
  model = ladder.build("custom", config)

`plug.check` runs the contract (shape, causality, decode) before anything trains.

Built-ins (BUILTINS: name -> (spec, fields)), each in the style of the step files:
  softmax         the transformer's attention (the scorecard's reference row)
  sliding_window  the same over the last 8 tokens (the sliding-window kernel)
  linear          elu + 1 linear attention: a fixed (S, z) state per head
  gated           a gated linear recurrence (GLA / Mamba family), trained in chunks
  hybrid          an 8-token window plus linear attention (the textbook hybrid)
The successors, each from its paper's equations: a chunked (or convolutional) training form,
a recurrent decode form, a state whose size each module's `state_size` states:
  retnet          RetNet retention, a fixed decay per head (Sun et al. 2023)
  gla             Gated Linear Attention, a data-dependent decay per key dim (Yang et al. 2023)
  mamba2          Mamba-2 / SSD, a scalar decay per head, state N (Dao & Gu 2024)
  deltanet        the delta rule, chunked (Yang et al. 2024)
  gated_deltanet  the delta rule with a decay and an output gate (Yang et al. 2025)
  based           Taylor linear attention plus an 8-token window (Arora et al. 2024)
  h3              a shift conv, then a diagonal SSM as a long convolution (Fu et al. 2023)
"""

from jaxformer.mixers.plug import MixerError, check, load, spec_of

BUILTINS = {
  "softmax": ("jaxformer.mixers.attention:SoftmaxAttention", {}),
  "sliding_window": (
    "jaxformer.mixers.attention:SoftmaxAttention",
    {"window": 8, "impl": "sliding_window"},
  ),
  "linear": ("jaxformer.mixers.linear:LinearAttention", {}),
  "gated": ("jaxformer.mixers.gated:GatedRecurrence", {}),
  "hybrid": ("jaxformer.mixers.hybrid:Hybrid", {"window": 8}),
  "retnet": ("jaxformer.mixers.retnet:Retention", {}),
  "gla": ("jaxformer.mixers.gla:GLA", {}),
  "mamba2": ("jaxformer.mixers.mamba2:Mamba2", {}),
  "deltanet": ("jaxformer.mixers.deltanet:DeltaNet", {}),
  "gated_deltanet": ("jaxformer.mixers.deltanet:DeltaNet", {"gated": True}),
  "based": ("jaxformer.mixers.based:Based", {"window": 8}),
  "h3": ("jaxformer.mixers.h3:H3", {}),
}
REFERENCE = "softmax"

# name -> (the field that sets the decode state's size, a few values of it, smallest first):
# the recall-vs-state sweep makes each built-in a curve, not a point (the reference's state
# grows with L: no sweep). Each module's `state_size` states what the field scales.
STATE_SWEEPS = {
  "sliding_window": ("window", (4, 8, 16)),
  "linear": ("head_dim", (4, 8, 16)),
  "gated": ("head_dim", (4, 8, 16)),
  "hybrid": ("window", (4, 8, 16)),
  "retnet": ("head_dim", (4, 8, 16)),
  "gla": ("head_dim", (4, 8, 16)),
  "mamba2": ("state", (4, 8, 16, 32)),
  "deltanet": ("head_dim", (4, 8, 16)),
  "gated_deltanet": ("head_dim", (4, 8, 16)),
  "based": ("feature_dim", (2, 4, 8)),
  "h3": ("state", (2, 8, 32)),
}

__all__ = ["BUILTINS", "REFERENCE", "STATE_SWEEPS", "MixerError", "check", "load", "spec_of"]
