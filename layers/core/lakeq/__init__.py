"""lakeq's core layer, one package per concern (the table of who may import whom, and why, is in
docs/design.md, "The core's packages"; ``tests/unit/test_architecture.py`` enforces it):

- pure rules, no AWS: ``common`` (errors, names, clock, payload limits, backoff, Logger/Metrics),
  ``log`` (segments, where a message goes, which queue to lock, what an ack settles, fan-out plans),
  ``rebalance`` (assignors, the group state machine and its codec), ``contract`` (request bodies);
- ``store``: pynamodb models and repositories, the only package that talks to DynamoDB;
- use cases: ``admin`` (topics, clients, keys, authentication), ``produce``, ``consume``, ``groups``,
  ``subscriptions``, ``fanout`` (the stream-triggered copy into subscription lists), ``sqs`` (the
  SQS-compatible endpoint), ``lake`` (archive and reports), ``console`` (the backlog console's view);
- ``api``: the HTTP routers and request plumbing over those use cases.

Each package names its public API in its ``__init__``; those names load their module on first use
(:func:`exports`), so a function's cold start imports only the modules it uses.
"""
from __future__ import annotations

import importlib
import sys


def exports(package: str, table: dict[str, tuple[str, ...]]):
    """Lazy re-exports for ``package`` (PEP 562): ``table`` maps each submodule to the public names
    it provides; ``from lakeq.<package> import name`` imports that submodule on first use only.
    Returns ``(__getattr__, __dir__, __all__)`` for the package to bind. O(1) per lookup; a name is
    cached on the package after its first use."""
    where: dict[str, str] = {}
    for module, names in table.items():
        for name in names:
            if where.setdefault(name, module) != module:
                raise ValueError(f"{package}: {name!r} is exported by both {where[name]} and {module}")

    def __getattr__(name: str):
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(where) | set(vars(sys.modules[package])))

    return __getattr__, __dir__, sorted(where)
