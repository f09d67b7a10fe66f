"""The EnvGen loop: Code Agent, Test Agent, Validator and Reviser per environment, with checkpoints.

See :mod:`gym_envfactory.generators.envgen` for the stages, the security model and the checkpoint
layout.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
import os
import shutil
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gym_envfactory.environment.manifest import DOMAINS, canonical_json
from gym_envfactory.validation import PROBE_HASH_SEEDS

from .. import prompts
from ..packages import add_catalog_dir, purge_modules
from ..sandbox import package_digest
from .jobs import EnvGenError, EnvGenJob, EnvGenOptions, EnvGenResult, EnvGenRun
from .packaging import write_package
from .report import Finding, ValidationOutcome
from .sandbox import validate_in_child
from .validator import validate_package

__all__ = ["EnvGen", "resume_checkpoint"]

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "envgen-checkpoint/1"
#: File of an attempt folder holding the package's digest taken before validation.
PACKAGE_DIGEST = "package.sha256"
#: Blocking findings shown to the Reviser (the report on disk keeps all of them).
MAX_FAILURES_IN_PROMPT = 60


def _llm_config_json(cfg: Any) -> dict[str, Any]:
    keys = ("model", "base_url", "api_key_env", "temperature", "seed", "max_concurrency", "timeout_s",
            "max_retries", "max_tokens")
    return {k: getattr(cfg, k) for k in keys if hasattr(cfg, k)}


def _read_json(p: Path) -> Any:
    return json.loads(p.read_text()) if p.is_file() else None


def _write_json(p: Path, obj: Any) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False, default=str))
    os.replace(tmp, p)


class EnvGen:
    """The EnvGen pipeline over one LLM client (shared by concurrent environments).

    Args:
        llm_config: an :class:`~gym_envfactory.generators.llm.LLMConfig`; its ``cache_dir`` defaults
            to ``<checkpoint_dir>/cache`` so a resumed run replays answered requests.
        options: :class:`EnvGenOptions`.
        client: an existing :class:`~gym_envfactory.generators.llm.LLMClient` (else one is made).
    """

    def __init__(self, llm_config: Any, options: EnvGenOptions | None = None, *, client: Any = None) -> None:
        from gym_envfactory.llm.client import LLMClient

        self.options = options or EnvGenOptions()
        if getattr(llm_config, "cache_dir", None) is None:
            try:
                llm_config.cache_dir = self.options.checkpoint_dir / "cache"
            except (AttributeError, TypeError):  # frozen config: rebuild it
                import dataclasses

                llm_config = dataclasses.replace(llm_config, cache_dir=self.options.checkpoint_dir / "cache")
        self.llm_config = llm_config
        self.client = client or LLMClient(llm_config)
        self._validations = asyncio.Semaphore(self.options.max_parallel_validations)

    # ------------------------------------------------------------------ public API
    async def generate(self, job: EnvGenJob) -> EnvGenResult:
        """Run the whole loop for one environment from scratch (a previous run's artefacts of the same
        name are discarded; the LLM cache still replays its answers)."""
        self._check_name(job.name or "")
        run = EnvGenRun(job=job, options=self.options, date=dt.datetime.now(dt.UTC).date().isoformat())
        if run.work.exists():
            shutil.rmtree(run.work)
        run.work.mkdir(parents=True)
        _write_json(run.work / "metadata.json", job.metadata)
        if job.resources:
            (run.work / "resources.md").write_text(job.resources)
        self._save(run)
        return await self._loop(run)

    async def generate_many(self, jobs: Sequence[EnvGenJob]) -> list[EnvGenResult]:
        """Several environments concurrently.  One environment's crash does not stop the others: it
        comes back as a ``crashed`` result whose checkpoint :func:`resume_checkpoint` continues."""
        names = [j.name or "" for j in jobs]  # EnvGenJob always sets a name
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise EnvGenError(f"two jobs generate the same environment name(s) {sorted(dup)}; pass distinct names")
        for n in names:
            self._check_name(n)
        results = await asyncio.gather(*(self.generate(j) for j in jobs), return_exceptions=True)
        out: list[EnvGenResult] = []
        for job, r in zip(jobs, results, strict=True):
            if isinstance(r, BaseException):
                if not isinstance(r, Exception):
                    raise r
                out.append(self._crashed(job, r))
            else:
                out.append(r)
        return out

    async def resume(self, checkpoint: str | Path) -> EnvGenResult:
        """Continue a run from its checkpoint file."""
        data = _read_json(Path(checkpoint))
        if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
            raise EnvGenError(f"{checkpoint} is not an EnvGen checkpoint")
        work = Path(data["paths"]["work"])
        metadata = _read_json(work / "metadata.json")
        if metadata is None:
            raise EnvGenError(f"{work / 'metadata.json'} is missing; the checkpoint cannot be resumed")
        res = work / "resources.md"
        job = EnvGenJob(metadata=metadata, name=data["name"], source=data.get("source", "metadata"),
                        resources=res.read_text() if res.is_file() else None)
        run = EnvGenRun(job=job, options=self.options, date=data.get("date") or dt.date.today().isoformat(),
                        stage=data.get("stage", "start"), attempt=int(data.get("attempt", 0)),
                        usage=data.get("usage") or {}, history=data.get("history") or [])
        if run.work.resolve() != work.resolve():
            raise EnvGenError(f"checkpoint work folder {work} is not under checkpoint_dir {self.options.checkpoint_dir}")
        if data.get("status") in ("passed", "quarantined"):
            run.status, run.output = data["status"], data.get("paths", {}).get("output")
            report = _read_json(run.attempt_dir() / "report.json")
            return self._result(run, ValidationOutcome.model_validate(report) if report else None)
        return await self._loop(run)

    # ------------------------------------------------------------------ the loop
    async def _loop(self, run: EnvGenRun) -> EnvGenResult:
        job, opts = run.job, self.options
        while True:
            adir = run.attempt_dir()
            adir.mkdir(parents=True, exist_ok=True)
            code = _read_json(adir / "code.json")
            if code is None:
                if run.attempt == 0:
                    code = await self._ask(run, "code", prompts.code_messages(
                        run.name, job.metadata, resources=job.resources, domains=DOMAINS), prompts.CODE_SCHEMA)
                else:
                    prev = run.attempt_dir(run.attempt - 1)
                    report = ValidationOutcome.model_validate(_read_json(prev / "report.json"))
                    code = await self._ask(run, "revise", prompts.revise_messages(
                        run.name, job.metadata, _read_json(prev / "code.json"), _read_json(prev / "scenarios.json")["scenarios"],
                        [f.model_dump() for f in report.blocking()[:MAX_FAILURES_IN_PROMPT]], run.attempt), prompts.REVISE_SCHEMA)
                _write_json(adir / "code.json", code)
                self._stage_done(run, "code" if run.attempt == 0 else "revise")
            tests = _read_json(adir / "scenarios.json")
            if tests is None:
                if run.attempt == 0:
                    answer = await self._ask(run, "test", prompts.scenario_messages(run.name, job.metadata, code),
                                             prompts.TEST_SCHEMA)
                    tests = {"scenarios": answer.get("scenarios") or [], "tasks": answer.get("tasks") or []}
                else:
                    prev = _read_json(run.attempt_dir(run.attempt - 1) / "scenarios.json")
                    tests = {"scenarios": code.get("scenarios") or prev["scenarios"],
                             "tasks": code["tasks"] if code.get("tasks") is not None else prev.get("tasks", [])}
                _write_json(adir / "scenarios.json", tests)
                if run.attempt == 0:
                    self._stage_done(run, "test")
            report_json = _read_json(adir / "report.json")
            if report_json is None:
                report = await self._validate(run, code, tests)
                _write_json(adir / "report.json", report.model_dump(mode="json"))
                run.history.append({"attempt": run.attempt, "passed": report.passed,
                                    "blocking": len(report.blocking()), "counts": report.counts(),
                                    "scenarios": f"{report.scenarios_passed}/{len(report.scenarios)}"})
                self._stage_done(run, "validate")
            else:
                report = ValidationOutcome.model_validate(report_json)
            if report.passed:
                changed = self._publish(run)
                if changed is not None:
                    report.findings.append(changed)
                    report = report.finish()
                    _write_json(adir / "report.json", report.model_dump(mode="json"))
                    self._quarantine(run, report)
                return self._result(run, report)
            if run.attempt >= opts.max_revisions:
                self._quarantine(run, report)
                return self._result(run, report)
            run.attempt += 1
            run.stage = "revise"
            self._save(run)

    async def _ask(self, run: EnvGenRun, stage: str, messages: list[dict[str, str]], schema: dict[str, Any]) -> dict[str, Any]:
        self._event(run, stage, f"asking the LLM (attempt {run.attempt})")
        reply = await self.client.chat(messages, stage=stage, json_schema=schema)
        run.add_usage(stage, reply)
        data = reply.data
        if not isinstance(data, dict):
            from gym_envfactory.errors import LLMOutputError

            problem = f"expected a JSON object, got {type(data).__name__}"
            raise LLMOutputError(f"stage {stage}: {problem}", raw=reply.text, first_raw=reply.text, error=problem,
                                 stage=stage)
        return data

    async def _validate(self, run: EnvGenRun, code: Mapping[str, Any], tests: Mapping[str, Any]) -> ValidationOutcome:
        adir = run.attempt_dir()
        provenance = {"kind": "generated", "model": getattr(self.llm_config, "model", None), "date": run.date,
                      "source": run.job.source,
                      "metadata_sha256": hashlib.sha256(canonical_json(run.job.metadata)).hexdigest()}
        pkg = write_package(adir / "pkg" / run.name, run.name, code, tests.get("scenarios") or [],
                            tests.get("tasks") or [], provenance, domain=self.options.domain)
        self._event(run, "validate", f"executing attempt {run.attempt}")
        # what is validated is what gets published: the digest is checked again right before publication
        (adir / PACKAGE_DIGEST).write_text(package_digest(pkg) + "\n")
        async with self._validations:
            if self.options.isolation == "process":
                report = await validate_in_child(pkg, run.work / "metadata.json", adir / "report.child.json",
                                                  run.attempt, self.options.validation_timeout_s,
                                                  sandbox=self.options.sandbox)
            else:
                report = await asyncio.to_thread(validate_package, pkg, run.job.metadata, attempt=run.attempt,
                                                 hash_seeds=PROBE_HASH_SEEDS)
        report.attempt = run.attempt
        self._event(run, "validate", f"attempt {run.attempt}: {'passed' if report.passed else f'{len(report.blocking())} blocking finding(s)'}")
        return report

    # ------------------------------------------------------------------ outputs
    def _check_name(self, name: str) -> None:
        from gym_envfactory.environment.catalog import catalog_folders, programmatic_environments

        dest = self.options.out_dir / name
        existing = catalog_folders().get(name)
        if existing is not None and existing.resolve() != dest.resolve():
            raise EnvGenError(f"environment {name} already exists in the catalog at {existing}; choose another --name")
        if name in programmatic_environments():
            raise EnvGenError(f"environment {name} is already defined in code; choose another --name")
        self._check_replaceable(dest)

    @staticmethod
    def _check_replaceable(dest: Path) -> None:
        if not dest.exists():
            return
        try:
            kind = tomllib.loads((dest / "environment.toml").read_text()).get("provenance", {}).get("kind")
        except (OSError, tomllib.TOMLDecodeError):
            kind = None
        if kind != "generated":
            raise EnvGenError(f"{dest} exists and is not a generated environment; EnvGen will not overwrite it")

    def _publish(self, run: EnvGenRun) -> Finding | None:
        """Publish the validated package, unless its files are not byte-identical to what was validated
        (then nothing is published and the ``package_changed`` finding is returned)."""
        src = run.attempt_dir() / "pkg" / run.name
        dest = self.options.out_dir / run.name
        self._check_replaceable(dest)
        self.options.out_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{run.name}.", dir=self.options.out_dir))
        shutil.copytree(src, tmp / run.name, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
        digest_file = run.attempt_dir() / PACKAGE_DIGEST
        want = digest_file.read_text().strip() if digest_file.is_file() else None
        got = package_digest(tmp / run.name)
        if want != got:
            shutil.rmtree(tmp)
            msg = (f"refused to publish {run.name}: its files changed during validation (sha256 {got[:12]} now, "
                   f"{(want or 'none recorded')[:12]} when validated); generated code rewrote its own package")
            log.error(msg)
            self._event(run, "refused", msg)
            return Finding.of("execution", "package_changed", msg)
        old = None
        if dest.exists():
            old = tmp / "old"
            os.replace(dest, old)
        os.replace(tmp / run.name, dest)
        shutil.rmtree(tmp)
        run.output = str(dest)
        run.status = "passed"
        run.stage = "done"
        self._save(run)
        if self.options.register:
            self._register(dest)
        self._event(run, "done", f"passed; written to {dest}")
        return None

    def _register(self, dest: Path) -> str:
        """Register a published environment with Gymnasium from its manifest alone.

        Generated code is never imported in this process here: the output folder is made discoverable
        through ``$ENVFACTORY_CATALOG`` and the gym id points at the generic entry point, so the code
        runs only when someone calls ``gym.make`` on it (and only then in whatever process does so).
        """
        import gymnasium as gym

        from gym_envfactory.environment.catalog import ENTRY_POINT, forget_environment

        man = tomllib.loads((dest / "environment.toml").read_text())
        name = str(man.get("name") or dest.name)
        major = int(str(man.get("version", "0.0.0")).split(".", 1)[0])
        add_catalog_dir(dest.parent)
        forget_environment(name)  # a previous publication of this name must not be served from the cache
        purge_modules(name)
        env_id = f"envfactory/{name}-v{major}"
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs={"env": name}, disable_env_checker=True)
        return env_id

    def _quarantine(self, run: EnvGenRun, report: ValidationOutcome) -> None:
        dest = self.options.quarantine_dir / run.name
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        pkg = run.attempt_dir() / "pkg" / run.name
        if pkg.is_dir():
            shutil.copytree(pkg, dest / "pkg", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(run.attempt_dir() / "code.json", dest / "code.json")
        shutil.copy(run.work / "metadata.json", dest / "metadata.json")
        _write_json(dest / "report.json", {"env": run.name, "status": "quarantined", "attempts": run.attempt + 1,
                                           "final": report.model_dump(mode="json"), "history": run.history,
                                           "usage": run.usage})
        run.output = str(dest)
        run.status = "quarantined"
        run.stage = "done"
        self._save(run)
        self._event(run, "done", f"quarantined after {run.attempt + 1} attempt(s); report {dest / 'report.json'}")

    # ------------------------------------------------------------------ bookkeeping
    def _stage_done(self, run: EnvGenRun, stage: str) -> None:
        run.stage = stage
        self._save(run)
        if self.options.after_stage is not None:
            self.options.after_stage(stage, run)

    def _save(self, run: EnvGenRun) -> None:
        _write_json(run.checkpoint, {
            "format": CHECKPOINT_FORMAT, "name": run.name, "source": run.job.source, "date": run.date,
            "stage": run.stage, "attempt": run.attempt, "status": run.status, "error": run.error,
            "paths": {"work": str(run.work), "attempt": str(run.attempt_dir()), "output": run.output},
            "llm": _llm_config_json(self.llm_config), "options": self.options.to_json(),
            "usage": run.usage, "history": run.history})

    def _event(self, run: EnvGenRun, event: str, detail: str) -> None:
        log.info("%s: %s: %s", run.name, event, detail)
        if self.options.on_event is not None:
            self.options.on_event(run.name, event, detail)

    def _result(self, run: EnvGenRun, report: ValidationOutcome | None) -> EnvGenResult:
        gym_id = f"envfactory/{run.name}-v0" if run.status == "passed" else None
        return EnvGenResult(name=run.name, status=run.status, attempts=run.attempt + 1, report=report,  # type: ignore[arg-type]
                            path=Path(run.output) if run.output else None, checkpoint=run.checkpoint,
                            usage=run.usage, history=run.history, gym_id=gym_id)

    def _crashed(self, job: EnvGenJob, exc: Exception) -> EnvGenResult:
        ckpt = self.options.checkpoint_dir / f"{job.name}.json"
        data = _read_json(ckpt) or {}
        if data:
            data["status"], data["error"] = "crashed", f"{type(exc).__name__}: {exc}"
            _write_json(ckpt, data)
        log.error("%s crashed: %s (resume with `envfactory gen resume %s`)", job.name, exc, ckpt)
        return EnvGenResult(name=job.name or "?", status="crashed", attempts=int(data.get("attempt", 0)) + 1,
                            report=None, path=None, checkpoint=ckpt, usage=data.get("usage") or {},
                            history=data.get("history") or [], error=f"{type(exc).__name__}: {exc}")


async def resume_checkpoint(checkpoint: str | Path, *, llm_overrides: Mapping[str, Any] | None = None,
                            client: Any = None, **option_overrides: Any) -> EnvGenResult:
    """Resume one environment's run from ``<checkpoint_dir>/<Name>.json`` with the LLM settings and
    options stored there (``llm_overrides``, e.g. a new ``base_url``, and ``option_overrides`` win)."""
    from gym_envfactory.llm.client import LLMConfig

    data = _read_json(Path(checkpoint))
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise EnvGenError(f"{checkpoint} is not an EnvGen checkpoint")
    opts = dict(data.get("options") or {})
    opts.update(option_overrides)
    options = EnvGenOptions(**opts)
    llm = dict(data.get("llm") or {})
    llm.update(llm_overrides or {})
    config = LLMConfig(**llm, cache_dir=options.checkpoint_dir / "cache")
    gen = EnvGen(config, options, client=client)
    try:
        return await gen.resume(checkpoint)
    except EnvGenError:
        raise
    except Exception as exc:  # noqa: BLE001 - a second crash is reported the same way as the first
        return gen._crashed(EnvGenJob(metadata={"class_name": data["name"]}, name=data["name"]), exc)
