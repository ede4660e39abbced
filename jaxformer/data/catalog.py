"""A TFDS catalog text dataset (tiny_shakespeare, lm1b, ...) as a byte/char LM task.

The catalog dataset is downloaded and prepared by TFDS itself (as array_record, under
<data_dir>/tfds) and read with `as_data_source()`; its text records are joined with
newlines and cut into windows exactly like the `text` task. Our train split is TFDS
`train`; our test split is TFDS `test`, or `validation` when there is no test split.

Offline, TFDS retries a download for ~200 s and ends in a ConnectionError. So when the
dataset is not already prepared we first probe the network for 2 s and, without one,
fail at once with a message that says what to do.
"""

import os
import socket
import threading
from typing import Any

import numpy as np

from jaxformer.data import text
from jaxformer.data.spec import DataError

PROBE_HOST = ("storage.googleapis.com", 443)  # TFDS's bucket; reachable means online
PROBE_TIMEOUT_S = 2.0
_READ_BATCH = 1024


def online(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """True if a TCP connection to PROBE_HOST opens within `timeout` seconds.

    Run in a daemon thread so that a resolver which hangs cannot hold us past it.
    """
    result: list[bool] = []

    def probe():
        try:
            socket.create_connection(PROBE_HOST, timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


def _builder(name: str, tfds_dir: str):
    import tensorflow_datasets as tfds

    try:
        return tfds.builder(name, data_dir=tfds_dir, file_format="array_record")
    except tfds.core.registered.DatasetNotFoundError:
        raise DataError(
            f"catalog.name={name}: not a TFDS catalog dataset "
            f"(see https://www.tensorflow.org/datasets/catalog/overview)"
        ) from None


def _read_text(source, feature: str, max_records: int, name: str) -> bytes:
    n = len(source) if max_records == 0 else min(max_records, len(source))
    parts = []
    for start in range(0, n, _READ_BATCH):
        for record in source.__getitems__(list(range(start, min(n, start + _READ_BATCH)))):
            if feature not in record:
                raise DataError(
                    f"catalog.feature={feature}: {name} has features {', '.join(record)}"
                )
            value = record[feature]
            value = value.item() if isinstance(value, np.ndarray) else value
            parts.append(value.encode() if isinstance(value, str) else bytes(value))
    return b"\n".join(parts)


def build(
    params: dict[str, Any], tfds_dir: str
) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, Any]]:
    """(examples per split, metadata) for `catalog:name=...`; see the module docstring."""
    name = params["name"]
    os.makedirs(tfds_dir, exist_ok=True)
    builder = _builder(name, tfds_dir)
    if not builder.is_prepared():
        if not online():
            raise DataError(
                f"catalog.name={name}: not prepared under {tfds_dir} and no network "
                f"({PROBE_HOST[0]}:{PROBE_HOST[1]} unreachable within {PROBE_TIMEOUT_S:g} s). "
                f"Run once with internet to download and prepare it, or point data_dir / "
                f"$JAXFORMER_DATA_DIR at a directory where it is prepared."
            )
        builder.download_and_prepare()
    splits = builder.info.splits
    test_split = "test" if "test" in splits else "validation"
    for ours, theirs in (("train", "train"), ("test", test_split)):
        if theirs not in splits:
            raise DataError(f"catalog.name={name}: no {theirs!r} split for our {ours!r} split")
    raw = {
        ours: _read_text(builder.as_data_source(theirs), params["feature"],
                         params["max_records"], name)
        for ours, theirs in (("train", "train"), ("test", test_split))
    }  # fmt: skip
    level = params["level"]
    if level == "char":  # one alphabet over both splits, split after encoding
        decoded = {}
        for split, data in raw.items():
            try:
                decoded[split] = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"catalog.level=char: {name} is not UTF-8 ({e})") from None
        raw = decoded
    ids, alphabet = text.encode(raw["train"] + raw["test"], level, field=f"catalog.name={name}")
    vocab_size = text.vocab_for(ids, level, alphabet, params, "catalog")
    cut = len(raw["train"])
    streams = {"train": ids[:cut], "test": ids[cut:]}
    examples = text.split_examples(streams, params, "catalog")
    return examples, {"vocab_size": vocab_size, "chars": alphabet}
