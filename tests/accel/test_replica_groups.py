"""compile_only's reading of HLO replica groups (the spellings XLA's partitioned HLO uses) and
which mesh axes a group spans; no compiler needed."""

import numpy as np
import pytest

from jaxformer.train import compile_only, sharding


@pytest.mark.parametrize(
  "text, groups",
  [
    ("{{0,1},{2,3}}", [[0, 1], [2, 3]]),
    ("{}", [[0, 1, 2, 3]]),
    ("[2,2]<=[4]", [[0, 1], [2, 3]]),
    ("[2,2]<=[2,2]T(1,0)", [[0, 2], [1, 3]]),
    ("mesh['axis_0'=2,'axis_1'=2] {'axis_0'}", [[0, 2], [1, 3]]),
    ("mesh['axis_0'=2,'axis_1'=2], device_ids=([2,2]T(1,0)) {'axis_1'}", [[0, 2], [1, 3]]),
    ("mesh['axis_0'=1,'axis_1'=2,'axis_2'=2] {'axis_0','axis_1'}", [[0, 2], [1, 3]]),
  ],
)
def test_replica_groups_spellings(text, groups):
  assert compile_only.replica_groups(text, 4) == groups


def test_collectives_by_axis_names_the_mesh_axes_a_group_spans():
  mesh = sharding.make_mesh((2, 2, 2))  # ids 0..7 laid out as (data, fsdp, tensor)
  ids = np.arange(8).reshape(2, 2, 2)
  assert ids[0, 0, 1] == 1
  hlo = "\n".join(
    [
      "  %a = f32[4]{0} all-gather(%p), replica_groups={{0,2},{1,3},{4,6},{5,7}}, dims={0}",
      "  %b = f32[4]{0} all-reduce(%p), replica_groups=[4,2]<=[8], to_apply=%add",
      "  %c = f32[4]{0} all-reduce(%p), replica_groups={{0,4},{1,5},{2,6},{3,7}}, to_apply=%add",
      "  %d = f32[4]{0} reduce-scatter(%p), replica_groups=[2,4]<=[2,2,2]T(1,0,2), dims={0}",
      "  %e = f32[4]{0} collective-permute(%p), source_target_pairs={{0,1},{1,0}}",
      "  %f = f32[4]{0} add(%a, %b)",
    ]
  )
  assert compile_only.collectives_by_axis(hlo, mesh) == {
    "fsdp": {"all-gather": 1},
    "tensor": {"all-reduce": 1, "collective-permute": 1},
    "data": {"all-reduce": 1},
    "data+tensor": {"reduce-scatter": 1},
  }
