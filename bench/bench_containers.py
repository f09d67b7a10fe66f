"""Container benchmark (docs/containers.md, docs/performance.md): image sizes and container cold start to healthy.

Measures, with the images `envfactory image base|runtime|build --all` made (built here if missing):
  1. image sizes: base, runtime, every environment image and its own layer over the runtime
     (``docker history``);
  2. cold start of a hardened container (``start_container``, as ``backend="docker"`` does it):
     docker create+start, first 200 from /healthz, /readyz checked; then the first session and first tool
     call through the fast protocol; then stop+remove;
  3. memory of an idle container and of one holding 100 live sessions, one call each (docker stats).
Prints the figures and writes bench/results/containers.json.
Usage: python bench/bench_containers.py [--quick] [--env HotelBooking] [-n 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

HERE = Path(__file__).resolve().parent


class ImageSize(TypedDict):
    tag: str
    mb: float


class RuntimeImageSize(ImageSize):
    over_base_mb: float


class EnvImageSize(ImageSize):
    layer_kb: float
    serves: list[str]
    tools: int


class ImageSizes(TypedDict):
    base: ImageSize
    runtime: RuntimeImageSize
    environments: dict[str, EnvImageSize]


class Summary(TypedDict):
    p50_s: float
    min_s: float
    max_s: float
    p90_s: float
    n: int


class ColdStart(TypedDict):
    env: str
    serves: list[str]
    to_healthy_and_ready: Summary
    first_session_and_call: Summary
    stop_and_remove: Summary


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def mem_mb(container) -> float:
    st = container.stats(stream=False)
    m = st.get("memory_stats", {})
    usage = m.get("usage", 0) - (m.get("stats", {}) or {}).get("cache", 0)
    return round(usage / 2**20, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--env", default="HotelBooking")
    ap.add_argument("-n", type=int, default=None, help="cold starts to measure")
    args = ap.parse_args()
    n = args.n or (3 if args.quick else 8)

    from gym_envfactory.backends.remote import SessionClient
    from gym_envfactory.containers.images import (
        DEFAULT_BASE_TAG,
        OFFICIAL_BASE,
        catalog_environments,
        docker_client,
        ensure_images,
        env_dependencies,
        env_image_tag,
        find_image,
        layer_sizes,
        runtime_tag,
    )
    from gym_envfactory.containers.run import start_container
    from gym_envfactory.environment.catalog import get_environment

    client = docker_client()

    def image(tag: str) -> Any:
        """The local image ``tag`` (a docker SDK Image); ensure_images built every one this bench reads."""
        img = find_image(client, tag)
        assert img is not None, f"image {tag} missing after ensure_images"
        return img

    t0 = time.monotonic()
    ensure_images(say=lambda m: print(f"[images] {m}", file=sys.stderr))
    ensure_s = time.monotonic() - t0
    base = DEFAULT_BASE_TAG if find_image(client, DEFAULT_BASE_TAG) is not None else OFFICIAL_BASE
    rt = image(runtime_tag())
    rt_size = int(rt.attrs["Size"])
    sizes: ImageSizes = {"base": {"tag": base, "mb": round(int(image(base).attrs["Size"]) / 1e6, 1)},
                         "runtime": {"tag": runtime_tag(), "mb": round(rt_size / 1e6, 1),
                                     "over_base_mb": round((rt_size - int(image(base).attrs["Size"])) / 1e6, 1)},
                         "environments": {}}
    for spec in catalog_environments():
        tag = env_image_tag(spec)
        img = image(tag)
        own = [layer for layer in layer_sizes(client, tag) if "COPY" in layer["created_by"] and "catalog" in layer["created_by"]]
        sizes["environments"][spec.name] = {
            "tag": tag, "mb": round(int(img.attrs["Size"]) / 1e6, 1),
            "layer_kb": round(sum(layer["size"] for layer in own[:1]) / 1e3, 1),
            "serves": [s.name for s in env_dependencies(spec)], "tools": len(spec.tools),
        }

    envs = [s.name for s in env_dependencies(get_environment(args.env))]
    # start_container returns once /healthz answered 200 and /readyz listed the environments.
    starts, first_call, stops = [], [], []
    mem_idle = mem_busy = None
    for i in range(n):
        t = time.perf_counter()
        url, stop, token = start_container(envs, timeout=60)
        starts.append(time.perf_counter() - t)
        t = time.perf_counter()
        c = SessionClient(url, token=token, timeout=30)
        sid = c.request("create", env=envs[0])["session_id"]
        tools = get_environment(envs[0]).tools
        tool = next((k for k, v in tools.items() if not v.mcp_schema()["inputSchema"].get("required")), next(iter(tools)))
        c.request("call", session_id=sid, name=tool, arguments={})
        first_call.append(time.perf_counter() - t)
        if i == 0:
            mem_idle = mem_mb(stop.container)
            for _ in range(100):  # each session materialises its state with one call
                s2 = c.request("create", env=envs[0])["session_id"]
                c.request("call", session_id=s2, name=tool, arguments={})
            mem_busy = mem_mb(stop.container)
        c.close()
        t = time.perf_counter()
        stop()
        stops.append(time.perf_counter() - t)

    def summary(xs: list[float]) -> Summary:
        return {"p50_s": round(statistics.median(xs), 3), "min_s": round(min(xs), 3), "max_s": round(max(xs), 3),
                "p90_s": round(pct(xs, 90), 3), "n": len(xs)}

    cold_start: ColdStart = {"env": args.env, "serves": envs, "to_healthy_and_ready": summary(starts),
                             "first_session_and_call": summary(first_call), "stop_and_remove": summary(stops)}
    out = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "docker": client.version().get("Version"),
                    "storage_driver": client.info().get("Driver")},
        "image_sizes": sizes,
        "ensure_images_s": round(ensure_s, 1),
        "cold_start": cold_start,
        "memory_mb": {"idle": mem_idle, "with_100_sessions": mem_busy},
    }
    print(f"images: base {sizes['base']['mb']} MB ({base}), runtime {sizes['runtime']['mb']} MB "
          f"(+{sizes['runtime']['over_base_mb']} MB over the base)")
    for s in sizes["environments"].values():
        print(f"  {s['tag']}: {s['mb']} MB, own layer {s['layer_kb']} kB ({', '.join(s['serves'])})")
    cs = cold_start
    print(f"cold start to healthy+ready ({args.env}, n={n}): p50 {cs['to_healthy_and_ready']['p50_s']} s, "
          f"min {cs['to_healthy_and_ready']['min_s']} s, max {cs['to_healthy_and_ready']['max_s']} s")
    print(f"first session + tool call after start: p50 {cs['first_session_and_call']['p50_s'] * 1e3:.1f} ms; "
          f"stop+remove p50 {cs['stop_and_remove']['p50_s']} s")
    print(f"container memory: idle {mem_idle} MiB, with 100 sessions {mem_busy} MiB")
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "containers.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {HERE / 'results' / 'containers.json'}")


if __name__ == "__main__":
    main()
