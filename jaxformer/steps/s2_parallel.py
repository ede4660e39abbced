"""Step 2: recurrence serializes training.

Pressure: with recurrence, unit (layer n, position t) waits for (n, t-1) and (n-1, t),
so the output at position L is L + layers - 1 dependent steps away from the input.
A non-recurrent layer reads all of layer n-1 at once: one step per layer, whatever L.
The dynamic-weight `Mixer` (jaxformer.nn.mixer) is that non-recurrent layer.

`critical_path` computes the longest chain of dependent steps on the actual
dependency graph of a stack of layers (a dynamic programme over units), rather than
quoting the closed form, so the experiment measures what the graph implies.
"""

import numpy as np


def critical_path(length, num_layers, recurrent):
  """Longest dependency chain, in unit evaluations, to compute every output.

  Unit (n, t) depends on (n-1, i) for every i <= t (causal mixing; for a recurrent
  layer only i = t) and, if recurrent, on (n, t-1).
  """
  if length < 1 or num_layers < 1:
    raise ValueError(f"length={length}, num_layers={num_layers}: both must be >= 1")
  below = np.zeros(length, dtype=np.int64)  # depth of layer n-1 (inputs: depth 0)
  for _ in range(num_layers):
    if recurrent:
      depth = np.empty(length, dtype=np.int64)
      prev = 0
      for t in range(length):
        prev = max(prev, below[t]) + 1
        depth[t] = prev
    else:
      depth = np.maximum.accumulate(below) + 1
    below = depth
  return int(below.max())
