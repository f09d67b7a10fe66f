"""Token-faithful episodes for trainers that generate with their own model (TRL's ``rollout_func``, the
SmolLM2 recipe's evaluation): the gym steps the text exactly as generated, and the trajectory keeps the
generated token ids as they came out of the model, so the training sequence is never re-tokenised from a
rewritten history (the failure VeRL/verifiers/prime-rl users report most).

An episode is one token sequence ``prompt_ids + completion_ids``::

    prompt_ids      the chat template applied to the opening messages (system, earlier turns, user)
    completion_ids  |<- generated ->|<- tool results / next user message ->|<- generated ->| ...
    completion_mask |  1 1 1 ... 1  |            0 0 ... 0                |  1 1 ... 1    |

Observation tokens are the template's rendering of the new messages alone (rendered after a fixed
one-message prefix and cut off it), so the tokens of earlier messages are never rendered twice.

Tokenizers without tool support in their chat template (SmolLM2's, for one) get :data:`CHATML_TOOLS`, a
ChatML template in the Hermes tool-call format the gym's parser reads (``<tool_call>{...}</tool_call>``).
Needs only a ``transformers`` tokenizer; generation is a callable you supply (see
:func:`hf_generate`), so nothing here needs a GPU.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gym_envfactory import EnvFactoryEnv

__all__ = ["CHATML_TOOLS", "TokenEpisode", "compact_tools", "ensure_tool_template", "hf_generate", "play_episodes",
           "rollout_output"]

#: ChatML with tools in the system message and Hermes tool calls (``<tool_call>`` JSON blocks); tool
#: results are ``tool`` messages.  The tool list is compact: one line per tool (name, parameters with
#: types, required ones marked, the description's first sentence).
CHATML_TOOLS = (
    "{%- set nl = '\\n' -%}"
    "{%- for message in messages -%}"
    "{%- if loop.first -%}"
    "{{- '<|im_start|>system' + nl -}}"
    "{%- if message['role'] == 'system' -%}{{- message['content'] -}}{%- endif -%}"
    "{%- if tools -%}"
    "{{- nl + nl + 'Tools (call one with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>):' -}}"
    "{%- for t in tools -%}{%- set f = t['function'] if 'function' in t else t -%}"
    "{%- set ps = f.get('parameters', {}) or {} -%}"
    "{{- nl + '- ' + f['name'] + '(' -}}"
    "{%- for p, s in (ps.get('properties') or {}).items() -%}"
    "{{- p -}}{%- if p not in (ps.get('required') or []) -%}{{- '?' -}}{%- endif -%}"
    "{%- if s.get('type') -%}{{- ': ' + s['type'] -}}{%- endif -%}{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{{- ') ' + (f.get('description') or '').split(nl)[0].split('. ')[0] -}}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>' + nl -}}"
    "{%- if message['role'] != 'system' -%}"
    "{{- '<|im_start|>' + message['role'] + nl + message['content'] + '<|im_end|>' + nl -}}"
    "{%- endif -%}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant' + nl + (message['content'] or '') -}}"
    "{%- for c in message.get('tool_calls') or [] -%}{%- set f = c['function'] if 'function' in c else c -%}"
    "{%- if message['content'] or not loop.first -%}{{- nl -}}{%- endif -%}"
    "{{- '<tool_call>{\"name\": \"' + f['name'] + '\", \"arguments\": ' -}}"
    "{{- f['arguments'] if f['arguments'] is string else (f['arguments'] | tojson) -}}"
    "{{- '}</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>' + nl -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + nl + message['content'] + '<|im_end|>' + nl -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant' + nl -}}{%- endif -%}"
)


def ensure_tool_template(tokenizer: Any) -> Any:
    """Give ``tokenizer`` :data:`CHATML_TOOLS` when its chat template cannot render tools (no ``tools``
    variable in it, or none at all).  Returns the tokenizer (changed in place)."""
    template = getattr(tokenizer, "chat_template", None)
    if not template or "tools" not in template:
        tokenizer.chat_template = CHATML_TOOLS
    return tokenizer


def compact_tools(tools: Sequence[Mapping[str, Any]], descriptions: bool = True) -> list[dict[str, Any]]:
    """OpenAI tool schemas cut to what a small model's prompt needs: name, first sentence of the
    description (none with ``descriptions=False``), parameter names, types and which are required
    (descriptions of parameters dropped).  Rendered by :data:`CHATML_TOOLS`, HotelBooking's 15 tools take
    ~560 tokens with descriptions, ~300 without (~1,400 as full schemas)."""
    out = []
    for t in tools:
        f = t.get("function", t)
        params = f.get("parameters", {}) or {}
        props = {k: ({"type": v["type"]} if isinstance(v, Mapping) and "type" in v else {})
                 for k, v in (params.get("properties") or {}).items()}
        out.append({"type": "function", "function": {
            "name": f["name"],
            "description": (f.get("description") or "").split("\n")[0].split(". ")[0] if descriptions else "",
            "parameters": {"type": "object", "properties": props, "required": list(params.get("required") or [])}}})
    return out


@dataclass
class TokenEpisode:
    """One played episode as tokens and as the gym saw it.

    Attributes:
        prompt_ids: token ids of the opening messages with the generation prompt.
        completion_ids: generated and observation tokens, in order.
        completion_mask: 1 for generated tokens, 0 for observation tokens (same length as ``completion_ids``).
        texts: each generated action exactly as decoded and stepped.
        reward: the episode reward in [0, 1] (paper §3.5), scored as the episode stands if it was cut.
        components: every reward component (``EpisodeScore.to_dict()``).
        truncated: the token budget or the step limit ended the episode before its last turn.
        turn_rewards: one reward in [0, 1] per user turn played (``TurnScore.reward`` of each turn reached,
            in order; a turn cut short scored as it stands), for turn-level credit assignment
            (docs/training.md, "Per-turn rewards").  Judged as ``RewardConfig.turn_state`` says.
        turn_spans: ``(begin, end)`` per entry of ``turn_rewards``: the half-open range of
            ``completion_ids`` from the turn's first generated token to its last (the observation tokens
            inside it, tool results, have ``completion_mask`` 0; the next user message lies after ``end``);
            ``(n, n)`` with ``n = len(completion_ids)`` for a turn reached with nothing generated.
    """

    env: EnvFactoryEnv
    options: dict[str, Any]
    tools: list[dict[str, Any]]
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    reward: float = 0.0
    components: dict[str, Any] = field(default_factory=dict)
    truncated: bool = False
    done: bool = False
    turn_start: int = 0  # index in ``texts`` of the current turn's first action
    turn_rewards: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    spans: dict[int, tuple[int, int]] = field(default_factory=dict, repr=False)  # turn -> span so far

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation as the gym holds it (``history="raw"``: assistant text as generated)."""
        return self.env.messages


#: ``generate(sequences, max_new_tokens) -> new token ids per sequence`` (one list per input sequence).
Generate = Callable[[list[list[int]], int], list[list[int]]]


def _template_ids(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                  generation_prompt: bool) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=True,
                                        add_generation_prompt=generation_prompt, return_dict=False)
    if isinstance(out, Mapping):  # some tokenizers return a BatchEncoding even with return_dict=False
        out = out["input_ids"]
    return list(out)


def _observation_ids(tokenizer: Any, new: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     after_eos: list[int]) -> list[int]:
    """Tokens the template puts for ``new`` messages (and the next generation prompt) after a conversation,
    without re-rendering what came before: render behind a fixed system message and cut that prefix off."""
    prefix = [{"role": "system", "content": "x"}]
    head = _template_ids(tokenizer, prefix, tools, False)
    full = _template_ids(tokenizer, prefix + new, tools, True)
    if full[:len(head)] != head:
        raise ValueError("the chat template does not render messages append-only; cannot build observation tokens")
    return after_eos + full[len(head):]


def _after_eos(tokenizer: Any) -> list[int]:
    """Tokens a template puts after the end-of-turn token of a message (ChatML: the newline)."""
    ids = _template_ids(tokenizer, [{"role": "system", "content": "x"}], None, False)
    eos = tokenizer.eos_token_id
    if eos is None or eos not in ids:
        return []
    last = len(ids) - 1 - ids[::-1].index(eos)
    return ids[last + 1:]


def play_episodes(generate: Generate, tokenizer: Any,
                  env_factory: Callable[[], EnvFactoryEnv] | Sequence[Callable[[], EnvFactoryEnv]],
                  options: Sequence[Mapping[str, Any]], *, max_steps: int = 8, max_new_tokens: int = 128,
                  max_completion_tokens: int = 1024, tools: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
                  | None = None, stop_on_repeat: bool = False) -> list[TokenEpisode]:
    """Play one episode per entry of ``options`` (reset options: ``task_id``, ``start_turn``, ``end_turn``),
    all in lock step: each round generates the next action of every unfinished episode in one
    ``generate`` call, steps each env with the decoded text, and appends the observation tokens.

    Args:
        generate: see :data:`Generate`; returns new tokens only (ending in EOS when the model stopped).
        tokenizer: a ``transformers`` tokenizer whose template renders tools (:func:`ensure_tool_template`).
        env_factory: makes a fresh :class:`EnvFactoryEnv` (``history="raw"`` is set on it); or one factory
            per entry of ``options``, so episodes of different environments share each ``generate`` batch.
        options: reset options per episode.
        max_steps: assistant actions per episode; then it is truncated and scored as it stands.
        max_new_tokens: tokens per action.
        max_completion_tokens: tokens per episode (generated + observations); past it the episode is cut
            and scored as it stands: an action cut by it is kept as tokens but never stepped, so every
            token that earned reward lies inside the budget.
        tools: maps the episode's OpenAI tool schemas to the ones put in the prompt (e.g. :func:`compact_tools`).
        stop_on_repeat: end an episode (truncated, scored as it stands) once an action repeats, character
            for character, an earlier action of the same turn: the repeat is stepped (it counts in the
            reward), but a greedy policy in a loop would only repeat it until ``max_steps``.  An evaluation
            setting that saves generation; leave it off for training, where sampled actions vary.

    Returns:
        the episodes, in the order of ``options``.

    Raises:
        UnknownTaskError, ValueError: bad reset options (before anything is generated).
    """
    episodes: list[TokenEpisode] = []
    factories = list(env_factory) if isinstance(env_factory, Sequence) else [env_factory] * len(options)
    if len(factories) != len(options):
        raise ValueError(f"{len(factories)} environment factories for {len(options)} episodes")
    for opt, make in zip(options, factories, strict=True):
        env = make()
        env.history = "raw"
        env.max_steps = max_steps
        obs, info = env.reset(options=dict(opt))
        schema = tools(info["tools"]) if tools else info["tools"]
        ep = TokenEpisode(env=env, options=dict(opt), tools=schema)
        ep.prompt_ids = _template_ids(tokenizer, obs, schema, True)
        episodes.append(ep)
    after_eos = _after_eos(tokenizer)
    eos = tokenizer.eos_token_id
    for _ in range(max_steps):
        live = [ep for ep in episodes if not ep.done]
        if not live:
            break
        room = [max_completion_tokens - len(ep.completion_ids) for ep in live]
        outs = generate([ep.prompt_ids + ep.completion_ids for ep in live], max(1, min(max_new_tokens, max(room))))
        for ep, new, left in zip(live, outs, room, strict=True):
            new = list(new)
            # an action the episode's token budget cut (no EOS at the budget) is kept as tokens but never
            # stepped: no token outside the trained sequence earns reward, and no half-written call runs
            cut = len(new) >= left and not (len(new) == left and new and new[-1] == eos)
            new = new[:max(0, left)] if cut else new
            turn, begin = ep.env.turn - ep.env.start_turn, len(ep.completion_ids)
            ep.spans[turn] = (ep.spans.get(turn, (begin, begin))[0], begin + len(new))
            if cut:
                ep.completion_ids += new
                ep.completion_mask += [1] * len(new)
                ep.texts.append(tokenizer.decode(new, skip_special_tokens=True))
                ep.truncated = True
                _finish(ep, None)
                continue
            ep.completion_ids += new
            ep.completion_mask += [1] * len(new)
            text = tokenizer.decode(new, skip_special_tokens=True)
            repeat = stop_on_repeat and text in ep.texts[ep.turn_start:]
            ep.texts.append(text)
            obs, _, terminated, truncated, info = ep.env.step(text)
            if terminated or truncated:
                ep.truncated = truncated
                _finish(ep, info)
                continue
            if ep.env.turn - ep.env.start_turn != turn:
                ep.turn_start = len(ep.texts)
            elif repeat:
                ep.truncated = True
                _finish(ep, None)
                continue
            extra = after_eos if new and new[-1] == eos else []
            obs_ids = _observation_ids(tokenizer, obs, ep.tools, extra)
            if len(ep.completion_ids) + len(obs_ids) > max_completion_tokens:
                ep.truncated = True
                _finish(ep, None)
                continue
            ep.completion_ids += obs_ids
            ep.completion_mask += [0] * len(obs_ids)
    for ep in episodes:
        if not ep.done:
            ep.truncated = True
            _finish(ep, None)
    return episodes


def _finish(ep: TokenEpisode, info: Mapping[str, Any] | None) -> None:
    score = ep.env.last_score if info is not None and ep.env.last_score is not None else ep.env.score()
    ep.reward = float(score.reward)
    ep.components = score.to_dict()
    ep.turn_rewards = [float(t.reward) for t in score.turns]
    n = len(ep.completion_ids)
    ep.turn_spans = [ep.spans.get(t, (n, n)) for t in range(len(ep.turn_rewards))]
    ep.done = True
    ep.env.close()


def hf_generate(model: Any, tokenizer: Any, *, temperature: float = 1.0, top_p: float = 1.0,
                do_sample: bool = True, reuse_cache: bool = False) -> Generate:
    """A :data:`Generate` over a ``transformers`` causal LM: left-pads the batch, samples (or decodes
    greedily with ``do_sample=False``), and returns each sequence's new tokens up to and including EOS.

    ``reuse_cache=True`` keeps the KV cache between calls: when every sequence of a call extends one of
    the previous call's sequences by its generated tokens and then new ones (the next round of the same
    episodes, as :func:`play_episodes` makes them; finished episodes may drop out), only the new tokens
    are prefilled.  The new tokens of each row are laid after the previous layout with padding in
    between (attention mask 0 there; positions follow the mask, as ``generate`` computes them), so no
    earlier token is recomputed.  Any other call starts afresh.  The model must not change between
    calls of one generator (make a new one after an optimiser step).
    """
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = tokenizer.eos_token_id
    kept: dict[str, Any] = {}  # the previous call: "rows" (real token lists), "ids"/"mask" (its layout), "cache"

    def layout(sequences: list[list[int]]) -> tuple[Any, Any, Any]:
        prev = kept.get("rows")
        if reuse_cache and prev:
            picks, j = [], 0
            for s in sequences:
                while j < len(prev) and not (len(s) > len(prev[j]) and s[:len(prev[j])] == prev[j]):
                    j += 1
                if j == len(prev):
                    break
                picks.append(j)
                j += 1
            if len(picks) == len(sequences):
                cache = kept["cache"]
                if len(picks) < len(prev):
                    cache.batch_select_indices(torch.tensor(picks))
                ext = [s[len(prev[i]):] for s, i in zip(sequences, picks, strict=True)]
                width = max(len(e) for e in ext)
                ids = torch.cat([kept["ids"][picks], torch.tensor([[pad] * (width - len(e)) + e for e in ext])], dim=1)
                mask = torch.cat([kept["mask"][picks], torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in ext])],
                                 dim=1)
                return ids, mask, cache
        width = max(len(s) for s in sequences)
        ids = torch.tensor([[pad] * (width - len(s)) + s for s in sequences])
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences])
        return ids, mask, None

    def generate(sequences: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        ids, mask, cache = layout(sequences)
        kwargs: dict[str, Any] = {"do_sample": do_sample, "max_new_tokens": max_new_tokens, "pad_token_id": pad,
                                  "eos_token_id": eos}
        if do_sample:
            kwargs.update(temperature=temperature, top_p=top_p)
        if reuse_cache:
            from transformers import DynamicCache

            kwargs.update(past_key_values=cache if cache is not None else DynamicCache(), return_dict_in_generate=True)
        was_training = model.training
        model.eval()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
        if was_training:
            model.train()
        seqs = getattr(out, "sequences", out)  # a model whose generate returns bare ids keeps no cache
        width = ids.shape[1]
        result = []
        for row in seqs[:, width:].tolist():
            cut = row.index(eos) + 1 if eos in row else len(row)
            result.append(row[:cut])
        if reuse_cache and getattr(out, "past_key_values", None) is None:
            kept.clear()
        elif reuse_cache:
            grown = seqs.shape[1] - width
            kept.update(rows=[s + r for s, r in zip(sequences, result, strict=True)], ids=seqs, cache=out.past_key_values,
                        mask=torch.cat([mask, torch.tensor([[1] * len(r) + [0] * (grown - len(r)) for r in result],
                                                           dtype=mask.dtype).reshape(len(result), grown)], dim=1))
        return result

    return generate


def rollout_output(episodes: Sequence[TokenEpisode]) -> dict[str, Any]:
    """What a TRL ``rollout_func`` returns for played ``episodes`` (one entry per episode, in order):
    TRL's keys ``prompt_ids``, ``completion_ids``, ``logprobs`` (None: TRL recomputes them) and
    ``env_mask`` (1 on generated tokens), plus the gym's ``envfactory_reward``, ``envfactory_components``,
    ``envfactory_turn_rewards`` and ``envfactory_turn_spans`` (``[begin, end)`` in ``completion_ids``)."""
    return {"prompt_ids": [ep.prompt_ids for ep in episodes],
            "completion_ids": [ep.completion_ids for ep in episodes],
            "logprobs": None,
            "env_mask": [ep.completion_mask for ep in episodes],
            "envfactory_reward": [ep.reward for ep in episodes],
            "envfactory_components": [ep.components for ep in episodes],
            "envfactory_turn_rewards": [ep.turn_rewards for ep in episodes],
            "envfactory_turn_spans": [[list(sp) for sp in ep.turn_spans] for ep in episodes]}


def episode_record(ep: TokenEpisode) -> dict[str, Any]:
    """A JSON-ready record of ``ep`` (messages as generated, tools, reward components, token counts)."""
    return {"options": ep.options, "reward": ep.reward, "components": ep.components, "truncated": ep.truncated,
            "turn_rewards": ep.turn_rewards, "turn_spans": [list(s) for s in ep.turn_spans],
            "texts": ep.texts, "messages": json.loads(json.dumps(ep.messages, default=str)), "tools": ep.tools,
            "prompt_tokens": len(ep.prompt_ids), "completion_tokens": len(ep.completion_ids),
            "generated_tokens": sum(ep.completion_mask)}
