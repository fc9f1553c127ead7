# -*- coding: utf-8 -*-
# Copyright (c) inferops.serving contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build a tiny random Qwen3 model and tokenizer locally, with no download.

usage: python tools/build_tiny_model.py --out DIR [--size tiny|small] [--force]

  tiny   about 3.5M parameters, float32: fast on a CPU (the default; demo and tests)
  small  about 150M parameters, bfloat16: for a GPU

The tokenizer is a byte-level BPE trained with `tokenizers` on text generated here from a fixed seed,
wrapped in PreTrainedTokenizerFast with a ChatML chat template; the model has random weights from a
fixed seed. Output is gibberish; the compute, API and timing of a real server are real.

Idempotent: when DIR already holds a complete model of that size (its marker file is written last),
nothing is done and that is said. Concurrent runs on one DIR are serialised by a lock file. The last
line printed is always the model directory.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import shutil
import sys

MARKER = ".inferops-tiny-model.json"
FORMAT = 3  # bump when a change to the build must rebuild existing models
SEED = 1234

SIZES = {
    "tiny": dict(vocab=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=64, dtype="float32"),
    "small": dict(vocab=8192, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=64, dtype="bfloat16"),
}

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

WORDS = (
    "the a an of to in and or is are was be model server token request response latency throughput "
    "gpu memory batch prefill decode speculative draft accept kernel tensor parallel expert router "
    "cache page block stream chunk queue worker scheduler engine variant baseline fingerprint health "
    "ready start stop restart signal process group host port ansible playbook role module inventory "
    "hello world what how why when where who which this that these those one two three four five "
    "quick brown fox jumps over lazy dog lorem ipsum dolor sit amet consectetur adipiscing elit"
).split()


def corpus(rng, lines=4000):
    """Deterministic local text: sentences of common words, numbers and punctuation."""
    out = []
    for dummy in range(lines):
        n = rng.randint(4, 18)
        words = [rng.choice(WORDS) for dummy in range(n)]
        if rng.random() < 0.3:
            words.insert(rng.randint(0, n), str(rng.randint(0, 100000)))
        sentence = " ".join(words)
        out.append(sentence[0].upper() + sentence[1:] + rng.choice([".", "?", "!", ",", ":"]))
    return out


def complete(out, size):
    try:
        with open(os.path.join(out, MARKER)) as handle:
            marker = json.load(handle)
    except (IOError, OSError, ValueError):
        return False
    if marker.get("size") != size or marker.get("format") != FORMAT:
        return False
    return all(os.path.exists(os.path.join(out, f)) for f in marker.get("files", []))


def build(out, size):
    import torch  # pylint: disable=import-error
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # pylint: disable=import-error
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM  # pylint: disable=import-error

    spec = dict(SIZES[size])
    rng = random.Random(SEED)
    torch.manual_seed(SEED)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=spec["vocab"], special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(rng), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = CHAT_TEMPLATE

    dtype = spec.pop("dtype")
    spec.pop("vocab")
    vocab = len(fast)  # what BPE learned from the corpus: every id the model can emit decodes to text
    config = Qwen3Config(vocab_size=vocab, max_position_embeddings=4096, tie_word_embeddings=True,
                         eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
                         bos_token_id=None, **spec)
    model = Qwen3ForCausalLM(config)
    # Tied embeddings: a zero row gives a token a logit of exactly 0, below the largest of the random
    # logits, so greedy decoding never emits it. Muted: the special tokens (EOS would end a request
    # early) and the byte fragments that are no text alone (a stream of them never yields a chunk).
    muted = set(fast.all_special_ids)
    muted.update(i for i in range(vocab) if "\ufffd" in fast.decode([i]))
    with torch.no_grad():
        for token_id in sorted(muted):
            model.get_input_embeddings().weight[token_id].zero_()
    model = model.to(getattr(torch, dtype))
    model.generation_config.max_new_tokens = 64
    params = sum(p.numel() for p in model.parameters())

    stage = os.path.join(out, ".building")
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    model.save_pretrained(stage)
    fast.save_pretrained(stage)
    files = sorted(os.listdir(stage))
    for name in files:
        os.replace(os.path.join(stage, name), os.path.join(out, name))
    os.rmdir(stage)
    marker = {"size": size, "format": FORMAT, "vocab": vocab, "params": params, "dtype": dtype, "seed": SEED, "files": files}
    tmp = os.path.join(out, MARKER + ".tmp")
    with open(tmp, "w") as handle:
        json.dump(marker, handle, indent=1)
    os.replace(tmp, os.path.join(out, MARKER))  # written last: its presence means complete
    return params


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--out", required=True, help="model directory to create (or reuse)")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--force", action="store_true", help="rebuild even when DIR is complete")
    args = parser.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not args.force and complete(out, args.size):
            print("%s already holds a complete %s model: nothing to do" % (out, args.size), file=sys.stderr)
        else:
            params = build(out, args.size)
            print("built a %s model (%.1fM parameters) in %s" % (args.size, params / 1e6, out), file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
