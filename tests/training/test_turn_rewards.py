"""Per-turn rewards for trainers (docs/training.md, "Per-turn rewards"): a token episode carries one reward
per user turn played and the span of that turn in ``completion_ids``; the TRL rollout function hands both
over, and with an α schedule recomposes the rewards at the trainer's global step."""

from __future__ import annotations

import json
from functools import partial

import pytest

from gym_envfactory import EnvFactoryEnv
from gym_envfactory.reward import AlphaSchedule
from gym_envfactory.training.episodes import play_episodes
from gym_envfactory.training.export.rl import rl_rows

EOS = 0
WRONG = {"name": "cancel_hotel_booking", "arguments": {"booking_id": "BK-0074", "reason": "x"}}  # the Oslo one
RIGHT = {"name": "modify_hotel_booking", "arguments": {"booking_id": "BK-0100", "check_in": "2027-01-09",
                                                       "check_out": "2027-01-12", "room_type": "QN", "guests": 1}}
SCRIPT = [f"<tool_call>{json.dumps(WRONG)}</tool_call>", "Done.", f"<tool_call>{json.dumps(RIGHT)}</tool_call>",
          "All set."]


class CharTokenizer:
    """A character tokenizer with a ChatML-like template, append-only (what the episode builder needs)."""

    eos_token_id = EOS
    pad_token_id = None

    def encode(self, text: str) -> list[int]:
        return [ord(c) + 1 for c in text]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(chr(i - 1) if i != EOS else ("" if skip_special_tokens else "</s>") for i in ids)

    def apply_chat_template(self, messages, tools=None, tokenize=True, add_generation_prompt=False, return_dict=False):
        ids: list[int] = []
        for m in messages:
            ids += self.encode(f"<{m['role']}>\n{m.get('content') or ''}") + [EOS] + self.encode("\n")
        return ids + (self.encode("<assistant>\n") if add_generation_prompt else [])


def _scripted_generate(tok, script=None):
    """Each episode's actions in turn: ``script`` (default :data:`SCRIPT`, then "Bye." after it), or with
    ``script`` given its last action repeated for ever."""
    seen: dict[int, int] = {}

    def generate(sequences, max_new_tokens):
        out = []
        for i, _ in enumerate(sequences):
            step = seen.get(i, 0)
            seen[i] = step + 1
            if script is None:
                out.append(tok.encode(SCRIPT[step] if step < len(SCRIPT) else "Bye.") + [EOS])
            else:
                out.append(tok.encode(script[min(step, len(script) - 1)]) + [EOS])
        return out

    return generate


@pytest.mark.parametrize("mode,expected", [("cumulative", [0.0, 0.5]), ("delta", [0.0, 1.0])])
def test_token_episode_carries_turn_rewards_and_spans(mode, expected):
    tok = CharTokenizer()
    factory = partial(EnvFactoryEnv, "HotelBooking", reward={"turn_state": mode})
    (ep,) = play_episodes(_scripted_generate(tok), tok, factory, [{"task_id": "hotel-014"}], max_steps=6)
    assert ep.turn_rewards == expected
    assert ep.turn_rewards == [t["reward"] for t in ep.components["turns"]]
    (b0, e0), (b1, e1) = ep.turn_spans
    assert 0 == b0 < e0 < b1 < e1 == len(ep.completion_ids)
    first, gap, second = (tok.decode(ep.completion_ids[a:b], skip_special_tokens=True)
                          for a, b in ((b0, e0), (e0, b1), (b1, e1)))
    assert "BK-0074" in first and "Done." in first and "BK-0100" not in first
    assert "Kyoto" in gap and "<user>" in gap  # the next user message lies between the spans
    assert "modify_hotel_booking" in second and "All set." in second
    assert all(m == 1 for m in ep.completion_mask[b0:b0 + len(tok.encode(SCRIPT[0]))])


def test_rollout_function_hands_turn_rewards_over_and_follows_the_alpha_schedule():
    torch = pytest.importorskip("torch")
    from gym_envfactory.training.trl import prompt_key, rollout_function

    tok = CharTokenizer()
    row = next(r for r in rl_rows(["HotelBooking"], split="train", per="task") if r["extra_info"]["task_id"] == "hotel-014")

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.step = 0

        def generate(self, input_ids, attention_mask, max_new_tokens, **kw):
            text = SCRIPT[self.step] if self.step < len(SCRIPT) else "Bye."
            self.step += 1
            new = tok.encode(text) + [EOS]
            return torch.tensor([ids + new for ids in input_ids.tolist()])

    def trainer(step):
        t = type("T", (), {})()
        t.model, t.processing_class = Model(), tok
        t.accelerator = type("A", (), {"unwrap_model": staticmethod(lambda m: m)})()
        t.args = type("Args", (), {"temperature": 1.0, "top_p": 1.0, "max_completion_length": 100_000})()
        t.state = type("S", (), {"global_step": step})()
        return t

    env_kwargs = {"reward": {"turn_state": "delta"}}
    plain = rollout_function([row], max_steps=6, env_kwargs=env_kwargs)([row["prompt"]], trainer(0))
    assert prompt_key(row["prompt"])  # the row's prompt found its episode
    comps = plain["envfactory_components"][0]
    assert plain["envfactory_alpha"] == [0.5] and plain["envfactory_reward"] == [comps["reward"]]
    assert plain["envfactory_turn_rewards"] == [[0.0, 1.0]]
    (b0, e0), (b1, e1) = plain["envfactory_turn_spans"][0]
    assert b0 < e0 < b1 < e1 == len(plain["completion_ids"][0])

    schedule = AlphaSchedule(steps=10, start=0.9, end=0.1)
    late = rollout_function([row], max_steps=6, env_kwargs=env_kwargs, alpha_schedule=schedule)([row["prompt"]], trainer(10))
    assert late["envfactory_alpha"] == [pytest.approx(0.1)]
    want = max(0.0, 0.1 * comps["r_traj"] + 0.9 * comps["r_state"] - comps["penalty"])
    assert late["envfactory_reward"] == [pytest.approx(want)] and want != pytest.approx(comps["reward"])
    turn1 = comps["turns"][1]  # turn 1: right calls and a right delta verdict, so 1.0 under any α
    assert late["envfactory_turn_rewards"][0][1] == pytest.approx(1.0) and turn1["r_state"] == 1.0


def test_stop_on_repeat_ends_a_looping_episode_after_the_repeat_is_stepped():
    tok = CharTokenizer()
    call = f"<tool_call>{json.dumps(WRONG)}</tool_call>"
    factory = partial(EnvFactoryEnv, "HotelBooking")
    (looped,) = play_episodes(_scripted_generate(tok, [call]), tok, factory, [{"task_id": "hotel-014"}], max_steps=6,
                              stop_on_repeat=True)
    assert looped.texts == [call, call] and looped.truncated and looped.done
    assert len(looped.env.records[0].calls) == 2  # the repeat ran and counts in the reward
    (full,) = play_episodes(_scripted_generate(tok, [call]), tok, factory, [{"task_id": "hotel-014"}], max_steps=6,
                            max_completion_tokens=10 ** 6)
    assert len(full.texts) == 6  # off by default: the step limit ends it


def test_stop_on_repeat_compares_within_a_turn_only():
    tok = CharTokenizer()
    # the same text ending turn 1 and then turn 2 is no loop: each ends its own turn
    script = [f"<tool_call>{json.dumps(WRONG)}</tool_call>", "Done.", "Done."]
    (ep,) = play_episodes(_scripted_generate(tok, script), tok, partial(EnvFactoryEnv, "HotelBooking"),
                          [{"task_id": "hotel-014"}], max_steps=6, stop_on_repeat=True)
    assert ep.texts == script and not ep.truncated and len(ep.turn_rewards) == 2
