"""The one dimension key and the logical axis names of jaxformer.

Dimension key, used in every einsum string, variable suffix and docstring:

  B  batch
  L  query length (the receiving units, "unit L")
  M  memory / key length (the source units x_i, i <= L)
  D  model width d
  H  heads (the number of dynamic coefficient functions a_j)
  K  head / rank dimension r
  F  MLP width d_ff
  V  vocabulary

Logical axis names annotate parameters (`nn.with_logical_partitioning`) and
activations (`nn.with_logical_constraint`). `RULES` maps them to the mesh axes
(data, fsdp, tensor); PartitionSpecs are built from it in `jaxformer.train.sharding`
and nowhere else.
"""

BATCH = "batch"
LENGTH = "length"
EMBED = "embed"
HEADS = "heads"
KV = "kv"
MLP = "mlp"
VOCAB = "vocab"
# A second model-width axis, for d x d kernels (values V_j, bilinear A_j, full-dynamic
# entries) so that both dimensions of one kernel never map to the same mesh axis.
EMBED_OUT = "embed_out"
# The leading axis of scanned layers' stacked parameters (LanguageModel(scan_layers=True)).
LAYERS = "layers"

# Per-head activations (queries, keys, values, head outputs) [B, L or M, H, K]: heads split
# over tensor as their kernels are.
HEADS_BLHK = (BATCH, LENGTH, HEADS, KV)

MESH_AXES = ("data", "fsdp", "tensor")

# logical name -> mesh axis (None: replicated). Batch over data x fsdp, weights sharded
# fully over fsdp (ZeRO-3 style) and over tensor along heads / MLP width / vocab.
RULES = (
  (BATCH, ("data", "fsdp")),
  (LENGTH, None),
  (EMBED, "fsdp"),
  (EMBED_OUT, None),
  (HEADS, "tensor"),
  (KV, None),
  (MLP, "tensor"),
  (VOCAB, "tensor"),
  (LAYERS, None),
)
