"""A plain PyTorch eager GPT of the train suite's shape: the comparator of `--compare torch`.

The same function as jaxformer's transformer rung at `jaxformer.bench.train.MODELS[size]`:
learned positions, pre-LN blocks (h = x + attn(LN(x)), O = h + mlp(LN(h))), biases on q/k/v,
Wo and the MLP, tanh-approximated GELU, a final LayerNorm, an untied output layer without
bias; the same parameter count (checked by the tests), float32. The step is what a PyTorch
user writes (nanoGPT's shape): one fused q/k/v `nn.Linear`, `F.scaled_dot_product_attention`
with `is_causal=True`, mean cross-entropy, `clip_grad_norm_`, AdamW with the train config's
betas and weight decay on the matrices (embeddings included, norms and biases not, as
jaxformer's decay mask). Only imported when a comparison asks for it: torch is a test
requirement, not a runtime one.
"""

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
  def __init__(self, d_model, num_heads, d_ff):
    super().__init__()
    self.num_heads = num_heads
    self.ln1 = nn.LayerNorm(d_model)
    self.qkv = nn.Linear(d_model, 3 * d_model)
    self.wo = nn.Linear(d_model, d_model)
    self.ln2 = nn.LayerNorm(d_model)
    self.w1 = nn.Linear(d_model, d_ff)
    self.w2 = nn.Linear(d_ff, d_model)

  def forward(self, x_BLD):
    B, L, D = x_BLD.shape
    H = self.num_heads
    q, k, v = self.qkv(self.ln1(x_BLD)).split(D, dim=-1)
    q_BHLK, k_BHMK, v_BHMK = (t.view(B, L, H, D // H).transpose(1, 2) for t in (q, k, v))
    o_BHLK = F.scaled_dot_product_attention(q_BHLK, k_BHMK, v_BHMK, is_causal=True)
    h_BLD = x_BLD + self.wo(o_BHLK.transpose(1, 2).reshape(B, L, D))
    return h_BLD + self.w2(F.gelu(self.w1(self.ln2(h_BLD)), approximate="tanh"))


class GPT(nn.Module):
  def __init__(self, vocab_size, d_model, num_heads, num_layers, d_ff, max_len):
    super().__init__()
    self.embed = nn.Embedding(vocab_size, d_model)
    self.pos_embed = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
    self.blocks = nn.ModuleList(Block(d_model, num_heads, d_ff) for _ in range(num_layers))
    self.final_norm = nn.LayerNorm(d_model)
    self.unembed = nn.Linear(d_model, vocab_size, bias=False)

  def forward(self, tokens_BL):
    x_BLD = self.embed(tokens_BL) + self.pos_embed[: tokens_BL.shape[1]]
    for block in self.blocks:
      x_BLD = block(x_BLD)
    return self.unembed(self.final_norm(x_BLD))


def build(model_config, train_config, seed=0):
  """(model, optimizer) for a jaxformer model config and training config."""
  c = model_config
  torch.manual_seed(seed)
  model = GPT(c.vocab_size, c.d_model, c.num_heads, c.num_layers, c.d_ff, c.max_len)
  decay = [p for p in model.parameters() if p.dim() >= 2]
  no_decay = [p for p in model.parameters() if p.dim() < 2]
  opt = torch.optim.AdamW(
    [
      {"params": decay, "weight_decay": train_config.weight_decay},
      {"params": no_decay, "weight_decay": 0.0},
    ],
    lr=train_config.learning_rate,
    betas=(train_config.adam_b1, train_config.adam_b2),
  )
  return model, opt


def train_step(model, opt, inputs_BL, targets_BL, clip_norm):
  """One AdamW step with gradient clipping; returns the loss (a tensor, not synced)."""
  logits_BLV = model(inputs_BL)
  loss = F.cross_entropy(logits_BLV.flatten(0, 1), targets_BL.flatten())
  opt.zero_grad(set_to_none=True)
  loss.backward()
  torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
  opt.step()
  return loss
