"""verifiers adapter (:mod:`gym_envfactory.training.verifiers_env`): a bad row of a ``dataset`` file is a
:class:`~gym_envfactory.errors.DatasetError` naming the file, the line and the key, never a bare ``KeyError`` or
``JSONDecodeError``; and verifiers' NeMo Gym client carries a bearer token to the resources server in
``task.headers``.  Runs in the verifiers venv (``make test-verifiers``); needs no harness (no uv)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time

import pytest

pytest.importorskip("verifiers.v1")

from gym_envfactory.errors import DatasetError  # noqa: E402
from gym_envfactory.training import verifiers_env  # noqa: E402
from gym_envfactory.training.nemo_gym import dataset_rows, resources_app  # noqa: E402


def taskset(path):
    config = verifiers_env.EnvFactoryTasksetConfig.model_validate({"dataset": str(path)})
    return verifiers_env.EnvFactoryTaskset(config)


@pytest.mark.parametrize(("line", "field", "words"), [
    ('{"responses_create_params": {"input": [], ', None, "not a JSON row"),
    ("[1, 2]", None, "JSON object"),
    ('{"reset_options": {"task_id": "hotel-002"}}', "responses_create_params", "missing"),
    ('{"responses_create_params": "x"}', "responses_create_params", "missing or not an object"),
    ('{"responses_create_params": {"input": "hi"}, "reset_options": [1]}', "reset_options", "not an object"),
])
def test_a_bad_dataset_line_names_file_line_and_key(tmp_path, line, field, words):
    good = json.dumps(dataset_rows("HotelBooking")[0])
    path = tmp_path / "rows.jsonl"
    path.write_text(f"{good}\n\n{line}\n", encoding="utf-8")
    with pytest.raises(DatasetError) as exc:
        list(taskset(path).load())
    err = exc.value
    assert err.file == str(path) and err.line == 3 and err.field == field and words in str(err)
    assert "\n" not in str(err)


def test_good_dataset_rows_load(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in dataset_rows("HotelBooking")[:2]), encoding="utf-8")
    assert len(list(taskset(path).load())) == 2


@contextlib.contextmanager
def served(app):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive()
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_verifiers_nemo_gym_client_sends_the_token_in_task_headers():
    from verifiers.v1.tasksets.nemo_gym.toolset import NeMoGymState

    row = dataset_rows("HotelBooking")[0]
    with served(resources_app("HotelBooking", token="s3cret")) as url:
        async def seed(headers):
            return (await NeMoGymState(resources_url=url, headers=headers).post("seed_session", row)).status_code

        assert asyncio.run(seed({})) == 401
        assert asyncio.run(seed({"Authorization": "Bearer s3cret"})) == 200
