"""What the importer's stand-ins cannot make deterministic (issue 12, part 3).

The runtime bridge (:mod:`.bridge`) gives an imported file seeded stand-ins for the global ``random``
functions, ``uuid1``/``uuid4``, clock reads and the builtin ``hash`` (``bridge.SEEDED_CALLS``).  Some
sources of nondeterminism have no stand-in: operating-system entropy (``os.urandom``, ``secrets``,
``random.SystemRandom``), concurrency whose interleaving decides the result (threads, process pools,
``multiprocessing``) and the process id (``os.getpid``).  (Configuration read from ``os.environ`` is
left alone: the same environment gives the same result.)  :func:`unfixable_nondeterminism` finds them in a file's source, each as
``"file:line: what: why"``, so an import can refuse the file naming the line.
"""

from __future__ import annotations

import ast

__all__ = ["NETWORK_CLIENTS", "UNFIXABLE_CALLS", "network_imports", "unfixable_nondeterminism"]

#: Calls (full dotted names after resolving imports) the stand-ins cannot make deterministic, and why.
UNFIXABLE_CALLS: dict[str, str] = {
    "os.urandom": "operating-system entropy",
    "os.getrandom": "operating-system entropy",
    "random.SystemRandom": "operating-system entropy",
    "threading.Thread": "a thread (the interleaving decides the result)",
    "threading.Timer": "a timer thread (the interleaving decides the result)",
    "concurrent.futures.ThreadPoolExecutor": "a thread pool (the interleaving decides the result)",
    "concurrent.futures.ProcessPoolExecutor": "a process pool (the interleaving decides the result)",
    "multiprocessing.Process": "another process (the interleaving decides the result)",
    "multiprocessing.Pool": "a process pool (the interleaving decides the result)",
    "os.getpid": "the process id (different in every process)",
}
_SECRETS = "operating-system entropy (the secrets module)"
_TAIL = "; no per-session stand-in exists, so the same calls could give different states"


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> full dotted name, for ``import a.b as c`` and ``from a import b as c``."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.partition(".")[0]] = a.name if a.asname else a.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def unfixable_nondeterminism(source: str, filename: str = "<source>") -> list[str]:
    """``"file:line: <call>() uses <what>; no per-session stand-in exists, ..."`` for every call in
    ``source`` of :data:`UNFIXABLE_CALLS` (names resolved through the file's imports) and of any
    ``secrets`` function, in line order; empty when there is none.  A syntax error is reported as
    one line, not raised."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        return [f"{filename}:{exc.lineno}: syntax error: {exc.msg}"]
    aliases = _aliases(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        target = node.func if isinstance(node, ast.Call) else node if isinstance(node, ast.Attribute) else None
        written = _dotted(target) if target is not None else None
        if written is None:
            continue
        head, _, rest = written.partition(".")
        full = aliases.get(head, head) + (f".{rest}" if rest else "")
        if isinstance(node, ast.Call):
            why = UNFIXABLE_CALLS.get(full) or (_SECRETS if full.startswith("secrets.") else None)
            if why is not None:
                found.append((node.lineno, f"{written}() uses {why}"))
    return [f"{filename}:{line}: {what}{_TAIL}" for line, what in sorted(set(found))]


#: Network client libraries (top-level module names): a server importing one makes live network calls.
NETWORK_CLIENTS: frozenset[str] = frozenset({
    "requests", "httpx", "aiohttp", "urllib3", "http.client", "urllib.request", "httplib2", "pycurl",
    "websocket", "websockets", "grpc", "boto3", "botocore", "smtplib", "ftplib", "paramiko", "socket",
})


def network_imports(source: str, filename: str) -> list[str]:
    """Imports of network client libraries (:data:`NETWORK_CLIENTS`) in ``source``, each as
    ``"file:line: imports X: ..."``.  An environment's results must come from its state: a server that
    makes live network calls cannot be replayed, isolated or scored (issue 26).  A file that does not
    parse gives no line (the analysis reports it)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            hit = next((c for c in sorted(NETWORK_CLIENTS) if name == c or name.startswith(c + ".")), None)
            if hit is not None:
                out.append(f"{filename}:{node.lineno}: imports {hit}, a network client library: the server makes live "
                           "network calls, which an environment cannot (its results must come from its state, so "
                           "sessions can be isolated, replayed and scored); import a version whose API class keeps "
                           "its data in the scenario instead")
                break
    return out
