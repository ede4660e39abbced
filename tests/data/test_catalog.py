"""The catalog task without the network: fail fast offline, read prepared TFDS data."""

import time

import numpy as np
import pytest
import tensorflow_datasets as tfds

from jaxformer.data import DataError, catalog, get_dataset

LINES = {"train": ["to be or not", "to be, that is"], "validation": ["the question"]}


class JaxformerTinyCorpus(tfds.core.GeneratorBasedBuilder):
    """A stand-in catalog dataset, registered with TFDS by its class name."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self, features=tfds.features.FeaturesDict({"text": tfds.features.Text()})
        )

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(lines) for split, lines in LINES.items()}

    def _generate_examples(self, lines):
        for i, line in enumerate(lines):
            yield i, {"text": line}


def fail_if_probed(*args):
    raise AssertionError("probed the network for prepared data")


def test_probe_returns_within_its_timeout():
    start = time.perf_counter()
    assert catalog.online(timeout=0.5) in (True, False)
    assert time.perf_counter() - start < 1.5


def test_offline_and_unprepared_fails_at_once_with_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "online", lambda: False)
    start = time.perf_counter()
    with pytest.raises(DataError) as info:
        get_dataset("catalog:name=tiny_shakespeare", "train", data_dir=str(tmp_path))
    assert time.perf_counter() - start < 5
    message = str(info.value)
    assert message.startswith("catalog.name=tiny_shakespeare: not prepared under")
    assert "Run once with internet" in message and "JAXFORMER_DATA_DIR" in message


def test_unknown_catalog_name(tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "online", fail_if_probed)
    with pytest.raises(DataError, match=r"^catalog.name=no_such_corpus_xyz: not a TFDS catalog"):
        get_dataset("catalog:name=no_such_corpus_xyz", "train", data_dir=str(tmp_path))


def test_prepared_catalog_data_is_read_without_the_network(tmp_path, monkeypatch):
    JaxformerTinyCorpus(
        data_dir=str(tmp_path / "tfds"), file_format="array_record"
    ).download_and_prepare()
    monkeypatch.setattr(catalog, "online", fail_if_probed)
    spec = "catalog:name=jaxformer_tiny_corpus,level=char,seq_len=4"
    train = get_dataset(spec, "train", data_dir=str(tmp_path))
    test = get_dataset(spec, "test", data_dir=str(tmp_path))  # no test split: validation
    text = "\n".join(LINES["train"])
    assert train.chars == "".join(sorted(set(text + "the question")))
    assert len(train) == (len(text) - 5) // 4 + 1
    assert train.decode(train.source[2]["inputs"]) == text[8:12]
    assert test.decode(test.source[0]["inputs"]) == "the "
    np.testing.assert_array_equal(test.source[0]["mask"], 1)
    with pytest.raises(DataError, match=r"^catalog.feature=words: jaxformer_tiny_corpus has"):
        get_dataset(spec + ",feature=words", "train", data_dir=str(tmp_path))
