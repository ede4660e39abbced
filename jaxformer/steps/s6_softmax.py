"""Step 6: sums over long sequences blow up -> softmax over the sources, causal mask.

Pressure: s_L = sum_{i<=L} a_iL v_i has L terms, so with unnormalized coefficients |s_L|
grows with L and a layer that works on short sequences saturates on long ones.
Fix: normalize each head's coefficients over the sources i <= L (M), not over the heads j
(swap the sums: s_L = sum_j sum_{i<=L} a_ij V_j x_i). For all receivers at once:
  a_BHLM = softmax_M(scores_BHLM / tau + mask_LM),   mask_LM = 0 if M <= L else -inf
  o_BLHK = sum_M a_BHLM v_BMHK,                      tau = sqrt(K) unless set
This step's piece is the "weights" slot of the Mixer (jaxformer.nn.mixer): scores_BHLM and
the mask in, weights a_BHLM out, sown as intermediates 'weights'. `normalize` names
(`NORMALIZERS`, the ladder's `normalizer` field; tau is its `temperature`, None: sqrt(K)):
- `none`:    a = s / tau, masked to 0. Step 5's raw coefficients: rows sum to anything
  and s_L grows with L.
- `sum`:     a = s / sum_M |s|. Rows have L1 norm 1, so s_L stays bounded, but the
  weights keep their signs and tau cancels: no knob for sharpness.
- `softmax`: positive, each row a distribution over the visible sources; a smaller tau
  puts more weight on the largest score. The rung `softmax` and every rung after it.
The mask: `causal_mask` (no reading the future; `window` keeps the last w sources).
One function, two forms: `attention_loop` takes one receiver at a time over i <= L with
no mask matrix; `attention_matrix` takes all receivers at once under the causal mask, the
form accelerators run (tests/nn/test_s6_softmax.py checks they are equal per normalizer).
Changed from step 5: the scorer and values stay; the normalizer changes from none to
softmax. Reference: Vaswani et al. 2017 (scaled dot-product attention, tau = sqrt(d_k)).
"""

from jaxformer.math.mixing import (
  NORMALIZERS,
  attention_loop,
  attention_matrix,
  causal_mask,
  normalize,
)

__all__ = ["NORMALIZERS", "attention_loop", "attention_matrix", "causal_mask", "normalize"]
