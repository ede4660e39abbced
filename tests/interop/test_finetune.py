"""Fine-tuning from GPT-2 (`config.init_from`): a small random Hugging Face GPT-2 saved to disk
with its tokenizer files starts training with the HF model's logits, its loss on a local text
falls, and the trained workdir samples through its tokenizer as `experiments.sample` does. No download: the model is random and
the tokenizer is a byte-level BPE learned here, saved in GPT-2's vocab.json + merges.txt."""

import jax
import numpy as np
import pytest

from jaxformer import data, decode, ladder
from jaxformer.data import bpe
from jaxformer.interop import finetune
from jaxformer.train import config as config_lib
from jaxformer.train import loop, program, sharding
from jaxformer.train import workdir as workdir_lib

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SENTENCE = "the quick brown fox jumps over the lazy dog; the dog sleeps. "
GPT2 = dict(n_layer=2, n_embd=32, n_head=2, n_positions=64)


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
  """(directory with config.json, model.safetensors, vocab.json, merges.txt; the HF model;
  the text file)."""
  root = tmp_path_factory.mktemp("finetune")
  corpus = root / "input.txt"
  corpus.write_text(SENTENCE * 120)
  directory = root / "gpt2"
  directory.mkdir()
  tokenizer = bpe.train([SENTENCE * 4], 300)
  tokenizer.model.save(str(directory))  # vocab.json + merges.txt
  torch.manual_seed(0)
  shape = transformers.GPT2Config(
    **GPT2, vocab_size=bpe.vocab_size(tokenizer), bos_token_id=0, eos_token_id=0
  )
  model = transformers.GPT2LMHeadModel(shape).eval()
  model.save_pretrained(directory)  # config.json + model.safetensors
  return directory, model, corpus


def _config(directory, corpus, **fields):
  c = config_lib.text_config(str(corpus))
  with c.unlocked():
    c.task = f"text:path={corpus},level=char,seq_len=32"
    c.init_from = str(directory)
    c.batch_size, c.total_steps, c.warmup_steps, c.learning_rate = 8, 40, 5, 3e-3
    c.eval_every = c.checkpoint_every = 40
    c.log_every = 10
    c.peak_flops_per_device = 1e11
    for key, value in fields.items():
      c[key] = value
  return c


def test_step_zero_is_the_hf_model_with_its_tokenizer(gpt2_dir, tmp_path):
  directory, reference, corpus = gpt2_dir
  config = finetune.resolve(_config(directory, corpus))
  assert config.model.d_model == 32 and config.model.num_layers == 2
  name, params = data.parse_spec(config.task)
  assert (params["level"], params["tokenizer"]) == ("bpe", str(directory))
  train = data.get_dataset(config.task, "train", data_dir=str(tmp_path))
  slow = transformers.GPT2Tokenizer(str(directory / "vocab.json"), str(directory / "merges.txt"))
  assert list(train.encode(SENTENCE)) == slow.encode(SENTENCE)  # GPT-2's own tokenization
  config = program.resolve(config, train)
  mesh = sharding.make_mesh(config.mesh_shape)
  with sharding.active(mesh):
    built = program.build(config, mesh, (config.batch_size, train.seq_len))
    params = finetune.initial_params(config, built.abstract_state["params"])
  tokens = np.stack([train.source[i]["inputs"] for i in range(2)])
  ours = np.asarray(built.model.apply({"params": params}, tokens))
  with torch.no_grad():
    theirs = reference(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
  np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)


def test_fine_tuning_lowers_the_loss_and_samples(gpt2_dir, tmp_path, monkeypatch):
  directory, _, corpus = gpt2_dir
  monkeypatch.setenv("JAXFORMER_DATA_DIR", str(tmp_path / "data"))
  workdir = tmp_path / "run"
  summary = loop.train(_config(directory, corpus), str(workdir))
  first, last = summary["losses"][0], float(np.mean(summary["losses"][-5:]))
  assert last < 0.8 * first, (first, last)  # threshold set before the first run
  assert summary["final_eval_loss"] < first
  assert (workdir / bpe.FILE).is_file()
  # what experiments.sample does (tests/train/test_text_run.py runs the command itself)
  task, trained = workdir_lib.read_task(workdir), workdir_lib.load(workdir)
  prompt = task.encode("the quick")
  (row,) = decode.generate_long(
    trained.model, trained.params, prompt[None], num_tokens=8, rng=jax.random.key(0), top_k=1
  )
  assert trained.config.model.d_model == 32 and task.tokenizer is not None
  assert len(row) == 8 and task.decode(np.concatenate([prompt, row])).startswith("the quick")


def test_a_bad_init_from_names_the_field(gpt2_dir, tmp_path):
  directory, _, corpus = gpt2_dir
  with pytest.raises(ladder.ConfigError, match="init_from=.*no such GPT-2"):
    finetune.resolve(_config(tmp_path / "missing", corpus))
  c = _config(directory, corpus)
  with c.unlocked():
    c.rung = "concat_wo"
  with pytest.raises(ladder.ConfigError, match="init_from=.*'transformer' rung, not rung="):
    finetune.resolve(c)
