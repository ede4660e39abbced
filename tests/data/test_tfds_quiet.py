"""Preparing a task prints nothing to stdout: TFDS's two lines per preparation are held back
(tfds_builder.prepare), so a change in how TFDS reports a preparation fails here."""

import numpy as np

from jaxformer.data import tfds_builder


def test_prepare_prints_nothing(tmp_path, capfd):
  arrays = {
    split: {k: np.zeros((2, 4), np.int32) for k in tfds_builder.FEATURES}
    for split in tfds_builder.SPLITS
  }
  capfd.readouterr()
  tfds_builder.prepare(str(tmp_path / "task"), arrays, {"spec": "x", "seq_len": 4})
  out = capfd.readouterr().out
  assert tfds_builder.is_prepared(str(tmp_path / "task"))
  assert out == "", out
