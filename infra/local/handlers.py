"""Load Lambda handlers from their CodeUri and give them a Lambda-like context object."""
from __future__ import annotations

import importlib.util
import itertools
import logging
import re
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .template import DEFAULT_ACCOUNT, DEFAULT_REGION, FunctionSpec

log = logging.getLogger("lakeq.local.handlers")

_import_lock = threading.RLock()
_instance_numbers = itertools.count(1)  # process-wide: every pooled instance has its own module


class LambdaContext:
    """The attributes and method of the Lambda Python context object that handlers use."""

    def __init__(self, spec: FunctionSpec, region: str = DEFAULT_REGION,
                 account_id: str = DEFAULT_ACCOUNT, request_id: str | None = None):
        self.function_name = spec.function_name or spec.logical_id
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = spec.memory_size
        self.invoked_function_arn = (
            f"arn:aws:lambda:{region}:{account_id}:function:{self.function_name}"
        )
        self.aws_request_id = request_id or str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = time.strftime("%Y/%m/%d") + "/[$LATEST]local"
        self.identity = None
        self.client_context = None
        self._deadline = time.monotonic() + spec.timeout

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


_layer_dirs: list[Path] = []


def add_to_sys_path(dirs: Iterable[Path]) -> None:
    """Put layer directories on ``sys.path`` (as Lambda does with ``/opt/python``); modules from
    them are imported afresh for every handler instance (see :func:`load_handler`)."""
    for d in dirs:
        d = Path(d).resolve()
        if d not in _layer_dirs:
            _layer_dirs.append(d)
        if str(d) not in sys.path:
            sys.path.append(str(d))


def _is_private(module: Any, roots: list[Path]) -> bool:
    f = getattr(module, "__file__", None)
    if not f:
        return False
    try:
        p = Path(f).resolve()
    except (OSError, ValueError):  # pragma: no cover
        return False
    return any(p.is_relative_to(r) for r in roots)


def load_handler(spec: FunctionSpec, instance: int = 0) -> Callable[[dict, Any], Any]:
    """Import ``spec.handler`` (``module.func``) from ``spec.code_uri`` under a unique module name
    (one per ``instance``: each instance has its own module globals, like a Lambda execution
    environment).

    Each instance gets its own copies of the modules it imports from its code directory and from
    the layers (``lakeq``, ``matcher``), as each Lambda execution environment has its own
    interpreter: module-level state such as a powertools ``Router`` shared by apps must not be
    shared by concurrent invocations. While the handler module is imported, those modules are
    taken out of ``sys.modules`` (and the code directory is put on ``sys.path``); afterwards the
    previous ones are put back, so the instance's copies live only through the handler's
    references. Imports done later, at call time, get the process-wide modules.
    """
    module_path, _, func_name = spec.handler.rpartition(".")
    if not module_path or not func_name:
        raise ValueError(f"{spec.logical_id}: bad Handler {spec.handler!r}")
    file = spec.code_uri.joinpath(*module_path.split(".")).with_suffix(".py")
    if not file.is_file():
        raise FileNotFoundError(f"{spec.logical_id}: handler module {file} does not exist")
    unique = "lakeq_local_fn_" + re.sub(r"\W", "_", f"{spec.logical_id}_{module_path}")
    if instance:
        unique += f"__{instance}"
    roots = [spec.code_uri.resolve(), *_layer_dirs]
    with _import_lock:
        code_dir = str(spec.code_uri)
        saved = {n: m for n, m in list(sys.modules.items()) if _is_private(m, roots)}
        for n in saved:
            del sys.modules[n]
        sys.path.insert(0, code_dir)
        try:
            mod_spec = importlib.util.spec_from_file_location(unique, file)
            assert mod_spec and mod_spec.loader
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[unique] = module
            try:
                mod_spec.loader.exec_module(module)
            finally:
                sys.modules.pop(unique, None)
        finally:
            try:
                sys.path.remove(code_dir)
            except ValueError:  # pragma: no cover
                pass
            for n, m in list(sys.modules.items()):
                if _is_private(m, roots):
                    del sys.modules[n]
            sys.modules.update(saved)
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise AttributeError(f"{spec.logical_id}: {file} has no callable {func_name!r}")
    return fn


class HandlerCache:
    """Warm handler instances per function, loaded on first use (thread-safe).

    Like Lambda, one instance serves one invocation at a time: a concurrent invocation of the
    same function gets another instance (its module imported again under another name), because
    handlers keep per-request state in module globals (powertools' resolver keeps
    ``current_event`` on the app object).
    """

    def __init__(self) -> None:
        self._idle: dict[str, list[Callable]] = {}
        self._count: dict[str, int] = {}
        self._lock = threading.Lock()
        self._generation = 0  # reset() counts: an instance busy at a reset is not kept

    def get(self, spec: FunctionSpec) -> Callable:
        """The first instance (for preloading and single-threaded use)."""
        with self.instance(spec) as fn:
            return fn

    @contextmanager
    def instance(self, spec: FunctionSpec) -> Iterator[Callable]:
        key = spec.logical_id
        with self._lock:
            idle = self._idle.setdefault(key, [])
            fn = idle.pop() if idle else None
            generation = self._generation
        if fn is None:
            fn = load_handler(spec, next(_instance_numbers))
            with self._lock:
                self._count[key] = self._count.get(key, 0) + 1
        try:
            yield fn
        finally:
            with self._lock:
                if generation == self._generation:
                    self._idle.setdefault(key, []).append(fn)

    def instances(self, logical_id: str) -> int:
        return self._count.get(logical_id, 0)

    def reset(self) -> None:
        """Drop the idle instances (the local stack's reset): the next invocation imports the handler's
        modules afresh. (Modules imported at call time are the process's and keep their state.)"""
        with self._lock:
            self._idle.clear()
            self._generation += 1
