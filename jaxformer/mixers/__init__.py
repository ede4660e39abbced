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
  gated           a gated linear recurrence (GLA / Mamba family), associative scan
  hybrid          an 8-token window plus linear attention (Based)
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
}
REFERENCE = "softmax"

__all__ = ["BUILTINS", "REFERENCE", "MixerError", "check", "load", "spec_of"]
