"""backend="docker": episodes, hardening, token, isolation, kill-and-restore (issue 3, parts 3-6)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import gymnasium as gym
import pytest

import gym_envfactory  # noqa: F401  (registers the catalog)
from gym_envfactory.backends.remote import RemoteSession, SessionClient
from gym_envfactory.containers.run import TOKEN_PATH, start_container
from gym_envfactory.envs.env import EnvFactoryEnv
from gym_envfactory.errors import BackendError, BackendUnavailableError
from gym_envfactory.rollout.policies import NoisyPolicy, OraclePolicy

ENV_ID = "envfactory/HotelBooking-v0"


def play(env, policy, task_id, seed=0):
    obs, _ = env.reset(seed=seed, options={"task_id": task_id})
    policy.begin(env.unwrapped)
    total, transcript, info, done = 0.0, [obs], {}, False
    while not done:
        obs, r, term, trunc, info = env.step(policy.act(env.unwrapped))
        transcript.append(obs)
        total += r
        done = term or trunc
    return total, transcript, info


def http(url, *, token=None, body=None):
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


@pytest.fixture
def docker_env(docker_images):
    made = []

    def make(env_id=ENV_ID, **kw):
        env = gym.make(env_id, backend="docker", **kw)
        made.append(env)
        return env

    yield make
    for e in made:
        e.close()


@pytest.fixture
def container(docker_images):
    """A hardened HotelBooking container started with start_container (not pooled)."""
    url, stop, token = start_container(["HotelBooking", "TeamCalendar"], timeout=60)
    yield url, stop, token
    stop()


def test_oracle_episodes_score_one_and_equal_inprocess(docker_env):
    env = docker_env()
    ids = env.unwrapped.tasks.ids()
    cross = [t.task_id for t in env.unwrapped.tasks if len(t.envs) > 1][:1]
    for tid in ids[:3] + cross:
        total, transcript, info = play(env, OraclePolicy(), tid)
        ref = play(EnvFactoryEnv("HotelBooking"), OraclePolicy(), tid)
        assert total == 1.0, (tid, info.get("score"))
        assert (total, transcript, info["score"]) == (ref[0], ref[1], ref[2]["score"]), tid


def test_noisy_episode_reward_equals_inprocess(docker_env):
    env = docker_env()
    for i, tid in enumerate(env.unwrapped.tasks.ids()[:4]):
        got = play(env, NoisyPolicy(p=0.5, seed=i), tid, seed=i)
        ref = play(EnvFactoryEnv("HotelBooking"), NoisyPolicy(p=0.5, seed=i), tid, seed=i)
        assert got[0] == ref[0] and got[1] == ref[1], tid
        assert got[2]["score"] == ref[2]["score"], tid


def test_container_hardening_flags(container, docker_client):
    url, stop, token = container
    c = docker_client.containers.get(stop.id)
    cfg, host = c.attrs["Config"], c.attrs["HostConfig"]
    assert cfg["User"] and not cfg["User"].startswith(("0", "root"))
    assert host["ReadonlyRootfs"] is True
    assert any(o.startswith("no-new-privileges") for o in host["SecurityOpt"])
    assert host["CapDrop"] == ["ALL"]
    assert host["Memory"] == 512 * 1024 * 1024
    assert host["NanoCpus"] == 1_000_000_000
    assert host["PidsLimit"] == 256
    assert "/tmp" in host["Tmpfs"]
    ip = {b["HostIp"] for b in host["PortBindings"]["8765/tcp"]}
    assert ip == {"127.0.0.1"}, "published on loopback only"
    # the token is a read-only mounted file: not in the environment, the command line or anything inspect shows
    assert "ENVFACTORY_TOKEN_FILE=" + TOKEN_PATH in cfg["Env"] and token not in json.dumps(c.attrs)
    assert not any(e.startswith("ENVFACTORY_TOKEN=") for e in cfg["Env"])
    [mount] = [m for m in c.attrs["Mounts"] if m["Destination"] == TOKEN_PATH]
    assert mount["RW"] is False and not Path(mount["Source"]).exists()  # the host copy is gone once it serves
    rc, out = c.exec_run(["sh", "-c", "cat /proc/1/cmdline /proc/1/environ"])
    assert rc == 0 and token.encode() not in out
    # What the process sees inside: a non-root uid, and a root filesystem it cannot write.
    rc, out = c.exec_run(["id", "-u"])
    assert rc == 0 and int(out.decode().strip()) != 0
    rc, out = c.exec_run(["sh", "-c", "touch /catalog/x || touch /srv/envfactory/x || touch /x"])
    assert rc != 0 and b"Read-only file system" in out
    rc, _ = c.exec_run(["sh", "-c", "touch /tmp/x"])
    assert rc == 0
    labels = c.image.labels
    assert labels["org.envfactory.name"] == "HotelBooking"
    assert labels["org.envfactory.tool-count"] == str(len(gym_envfactory.get_environment("HotelBooking").tools))
    assert labels["org.envfactory.content-hash"] == gym_envfactory.get_environment("HotelBooking").content_hash()


def test_token_refusal(container):
    url, _, token = container
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert http(url + "/healthz")[0] == 200  # liveness needs no token
    assert http(url + "/v1/rpc", body=ping)[0] == 401
    assert http(url + "/v1/rpc", body=ping, token="not-the-token")[0] == 401
    assert http(url + "/readyz")[0] == 401
    assert http(url + "/metrics")[0] == 401
    status, body = http(url + "/v1/rpc", body=ping, token=token)
    assert status == 200 and body["result"] == {"ok": True}
    with pytest.raises(BackendUnavailableError):
        SessionClient(url, token=None, timeout=10)
    status, body = http(url + "/readyz", token=token)
    assert status == 200 and sorted(e["name"] for e in body["envs"]) == ["HotelBooking", "TeamCalendar"]


def test_two_envs_share_one_container_and_stay_isolated(docker_env, docker_client):
    a, b = docker_env(), docker_env()
    assert a.unwrapped.backend.url == b.unwrapped.backend.url, "one container serves both envs"
    tid = a.unwrapped.tasks.ids()[0]
    oracle, noisy = OraclePolicy(), NoisyPolicy(p=0.7, seed=3)
    a.reset(options={"task_id": tid})
    b.reset(seed=3, options={"task_id": tid})
    initial = b.unwrapped.session.state()
    oracle.begin(a.unwrapped)
    noisy.begin(b.unwrapped)
    # A finishes its episode first: B's state must not move.
    ra, done = 0.0, False
    while not done:
        _, r, term, trunc, _ = a.step(oracle.act(a.unwrapped))
        ra += r
        done = term or trunc
    assert ra == 1.0
    assert b.unwrapped.session.state() == initial
    # Then interleave a second episode of A with B's noisy one.
    a.reset(options={"task_id": tid})
    oracle.begin(a.unwrapped)
    rb, done_a, done_b, transcript = 0.0, False, False, []
    ra = 0.0
    while not (done_a and done_b):
        if not done_b:
            obs, r, term, trunc, info_b = b.step(noisy.act(b.unwrapped))
            transcript.append(obs)
            rb += r
            done_b = term or trunc
        if not done_a:
            _, r, term, trunc, _ = a.step(oracle.act(a.unwrapped))
            ra += r
            done_a = term or trunc
    ref = play(EnvFactoryEnv("HotelBooking"), NoisyPolicy(p=0.7, seed=3), tid, seed=3)
    assert ra == 1.0
    assert rb == ref[0] and transcript == ref[1][1:]
    assert info_b["score"] == ref[2]["score"]


def test_killed_container_raises_then_new_container_restores_snapshot(docker_env, container_of, docker_client):
    env = docker_env()
    u = env.unwrapped
    tid = next(t.task_id for t in u.tasks if sum(len(turn.ground_truth) for turn in t.turns) >= 2)
    policy = OraclePolicy()
    env.reset(options={"task_id": tid})
    policy.begin(u)
    total = 0.0
    _, r, term, trunc, _ = env.step(policy.act(u))  # one write/read of the ground truth
    total += r
    assert not (term or trunc)
    snap = u.session.snapshot()  # the last snapshot before the crash
    state = u.session.state()
    c = container_of(u.backend.url)
    c.kill()
    action = policy.act(u)
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailableError) as err:
        env.step(action)
    waited = time.monotonic() - t0
    assert "no answer within" not in str(err.value), "a dead container must be reported, not waited out"
    assert waited < 30, f"took {waited:.1f} s to notice the dead container"  # a hang guard, not a benchmark
    # A new container restores the session from the snapshot; the episode continues to reward 1.0.
    names = list(u.session.envs)
    url, stop, token = start_container(["HotelBooking", "TeamCalendar"], timeout=60)
    client = SessionClient(url, token=token, timeout=30)
    try:
        res = client.request("create", env=names if len(names) > 1 else names[0], snapshot=snap.decode())
        restored = RemoteSession(client, res["session_id"], list(u.session.envs.values()))
        assert restored.state() == state
        assert client.request("stats")["sessions"] == 1, "a new server starts clean"
        u.session = restored
        obs, r, term, trunc, info = env.step(action)  # the step that failed, again
        total += r
        while not (term or trunc):
            obs, r, term, trunc, info = env.step(policy.act(u))
            total += r
        assert total == 1.0, info.get("score")
        u.session.close()
        u.session = None
    finally:
        client.close()
        stop()


def test_missing_image_is_a_clear_backend_error(docker_images):
    with pytest.raises(BackendError, match="envfactory image build|missing"):
        start_container(["HotelBooking"], image="envfactory/does-not-exist:0.0.0", timeout=5)


def test_catalog_dir_serves_a_mounted_catalog_from_the_runtime_image(docker_images, tmp_path):
    from pathlib import Path

    catalog = Path(gym_envfactory.__file__).resolve().parent.parent / "env_images"
    url, stop, token = start_container(["PersonalFinance", "TeamCalendar"], catalog_dir=catalog, timeout=60,
                                       mem_limit="256m")
    try:
        status, body = http(url + "/readyz", token=token)
        assert status == 200
        assert {"PersonalFinance", "TeamCalendar"} <= {e["name"] for e in body["envs"]}
    finally:
        stop()
