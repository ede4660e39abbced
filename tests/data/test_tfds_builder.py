"""TFDS array_record writing: exact round trip, order kept, atomic publish."""

import os

import numpy as np

from jaxformer.data import tfds_builder


def arrays(n, L, offset=0):
    x = (np.arange(n * L, dtype=np.int32).reshape(n, L) + offset) % 97
    return {"inputs": x, "targets": (x + 1) % 97, "mask": (x % 2).astype(np.int32)}


def test_round_trip_keeps_values_order_and_metadata(tmp_path):
    path = str(tmp_path / "task")
    data = {"train": arrays(37, 5), "test": arrays(11, 5, offset=3)}
    meta = {"spec": "fake:x=1", "seq_len": 5, "vocab_size": 97, "chars": None}
    tfds_builder.prepare(path, data, meta)
    assert tfds_builder.read_metadata(path) == meta
    builder = tfds_builder.load(path, 5)
    for split, a in data.items():
        source = builder.as_data_source(split)
        assert len(source) == len(a["inputs"])
        got = source.__getitems__(list(range(len(source))))
        for k in tfds_builder.FEATURES:
            stacked = np.stack([g[k] for g in got])
            assert stacked.dtype == np.int32
            np.testing.assert_array_equal(stacked, a[k])  # record i is example i
        np.testing.assert_array_equal(source[4]["inputs"], a["inputs"][4])
    assert os.listdir(tmp_path) == ["task"]  # no temporary directory left behind


def test_a_lost_race_keeps_the_winner_and_cleans_up(tmp_path):
    path = str(tmp_path / "task")
    meta = {"spec": "fake:x=1", "seq_len": 4, "vocab_size": 97, "chars": None}
    first = {"train": arrays(6, 4), "test": arrays(2, 4)}
    tfds_builder.prepare(path, first, meta)
    tfds_builder.prepare(path, {"train": arrays(6, 4, 5), "test": arrays(2, 4)}, meta)
    source = tfds_builder.load(path, 4).as_data_source("train")
    np.testing.assert_array_equal(source[0]["inputs"], first["train"]["inputs"][0])
    assert os.listdir(tmp_path) == ["task"]
