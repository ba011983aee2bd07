"""A tiny randomly initialised causal LM and a tokenizer trained here: a Hugging Face model folder
made without a download, for tests and smoke runs of the language-model baselines (``--model``).

``build_tiny_lm(out_dir)`` trains a byte-level BPE tokenizer on a corpus (default: the prompts and
reference solutions of the builtin task set), gives it a chat template, builds a GPT-2 of a few
thousand parameters from a config (weights from ``seed``) and saves both with ``save_pretrained``.
The folder loads offline with ``AutoModelForCausalLM.from_pretrained(out_dir)`` and
``AutoTokenizer.from_pretrained(out_dir)``. Its programs are noise: it exists so that a training
step can run end to end on CPU in seconds, not to solve anything.

From the shell: ``python -m baselines.tiny_lm OUT_DIR [--seed N] [--vocab-size N] ...``.
Needs ``transformers`` and ``tokenizers`` (extra ``trl`` or ``llm``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["CHAT_TEMPLATE", "EOS", "build_tiny_lm", "default_corpus", "main"]

EOS = "<|endoftext|>"
"""The one special token: end of text, also the padding and beginning-of-sequence token."""

CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|>\\n' }}"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for part in m['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}"
    "{% endif %}"
    "{{ '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)
"""``<|role|>`` newline, the content, ``<|end|>`` newline per message; ``<|assistant|>`` to generate."""

_ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]


def default_corpus() -> list[str]:
    """The prompts and reference solutions of the builtin task set, one text each."""
    import registry

    texts: list[str] = []
    for task in registry.load("builtin"):
        texts += [task.prompt, task.reference_solution]
    return texts


def _positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")


def build_tiny_lm(out_dir: str | Path, corpus: Iterable[str] | None = None, *, seed: int = 0,
                  vocab_size: int = 512, n_embd: int = 32, n_layer: int = 2, n_head: int = 2,
                  n_positions: int = 1024) -> Path:  # fmt: skip
    """Write a tiny GPT-2 and its tokenizer into ``out_dir`` (created; existing model files are
    overwritten) and return it as a ``Path``.

    ``corpus``: the texts the tokenizer learns its merges from (default ``default_corpus()``).
    The tokenizer is byte-level BPE: every byte has a token, so any text encodes and decodes
    back exactly; ``vocab_size`` counts the 256 bytes, the special tokens and the merges (it must
    be at least 261). ``seed`` fixes the weights: the same arguments give the same files.
    ``n_embd``, ``n_layer``, ``n_head``, ``n_positions``: the GPT-2 config (``n_positions`` is
    also the tokenizer's ``model_max_length``)."""
    for name, value in (("vocab_size", vocab_size), ("n_embd", n_embd), ("n_layer", n_layer), ("n_head", n_head),
                        ("n_positions", n_positions)):  # fmt: skip
        _positive(name, value)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir: {out} exists and is not a directory")
    if n_embd % n_head:
        raise ValueError(f"n_embd: must be a multiple of n_head ({n_head}), got {n_embd}")
    n_special = 1 + len(_ROLE_TOKENS)
    if vocab_size < 256 + n_special:
        raise ValueError(f"vocab_size: expected at least {256 + n_special} (256 bytes and {n_special} special tokens), "
                         f"got {vocab_size}")  # fmt: skip
    texts = default_corpus() if corpus is None else [corpus] if isinstance(corpus, str) else list(corpus)
    if not all(isinstance(t, str) for t in texts):
        bad = next(t for t in texts if not isinstance(t, str))
        raise TypeError(f"corpus: expected an iterable of str, got an item of type {type(bad).__name__}")
    if not any(texts):
        raise ValueError("corpus: expected at least one non-empty text to train the tokenizer on")

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, *_ROLE_TOKENS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    bpe.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=EOS, eos_token=EOS, pad_token=EOS,
                                        additional_special_tokens=_ROLE_TOKENS, model_max_length=n_positions,
                                        clean_up_tokenization_spaces=False)  # fmt: skip
    tokenizer.chat_template = CHAT_TEMPLATE
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    assert isinstance(eos_id, int)

    config = GPT2Config(vocab_size=len(tokenizer), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer,
                        n_head=n_head, bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id)  # fmt: skip
    with torch.random.fork_rng(devices=[]):  # the caller's torch generator is left as it was
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    model.generation_config = GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id)

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # transformers 5 names the class TokenizersBackend, which 4.x does not know; both load this name
    config_path = out / "tokenizer_config.json"
    tok_config = json.loads(config_path.read_text(encoding="utf-8"))
    tok_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(tok_config, indent=2) + "\n", encoding="utf-8")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m baselines.tiny_lm", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="the folder to write the model and tokenizer into")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights (default 0)")
    parser.add_argument("--vocab-size", type=int, default=512, help="tokenizer vocabulary, bytes included (default 512)")
    parser.add_argument("--n-embd", type=int, default=32, help="width of the model (default 32)")
    parser.add_argument("--n-layer", type=int, default=2, help="transformer blocks (default 2)")
    parser.add_argument("--n-head", type=int, default=2, help="attention heads (default 2)")
    parser.add_argument("--n-positions", type=int, default=1024, help="context length in tokens (default 1024)")
    args = parser.parse_args(argv)
    try:
        out = build_tiny_lm(args.out_dir, seed=args.seed, vocab_size=args.vocab_size, n_embd=args.n_embd,
                            n_layer=args.n_layer, n_head=args.n_head, n_positions=args.n_positions)  # fmt: skip
    except (ValueError, TypeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
