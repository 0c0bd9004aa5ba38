"""Issue 15 item 3 (one Metrics/Logger set-up): the powertools logger and metrics are made once, in
:mod:`lakeq.common.obs`, with their service and namespace read from ``POWERTOOLS_*`` (template.yaml)."""
from __future__ import annotations

import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "functions").glob("*/app.py"), *(ROOT / "layers" / "core" / "lakeq").rglob("*.py")])


def test_no_module_but_obs_makes_a_logger_or_metrics():
    makers = re.compile(r"\b(Logger|Metrics|Tracer)\(")
    found = [str(p.relative_to(ROOT)) for p in SOURCES
             if p.name != "obs.py" and makers.search(p.read_text())]
    assert found == []


def test_template_globals_set_the_powertools_names():
    class Loader(yaml.SafeLoader):
        pass
    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    tpl = yaml.load((ROOT / "template.yaml").read_text(), Loader=Loader)
    env = tpl["Globals"]["Function"]["Environment"]["Variables"]
    assert {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE"} <= set(env)


def test_obs_reads_the_environment():
    """tests/conftest.py puts template.yaml's environment in os.environ, as the local stack does:
    the namespace and service are the stack's (``lakeq/<stack name>``, ``<stack name>``)."""
    from lakeq.common import obs
    assert obs.logger.service == "lakeq-local"
    assert obs.metrics.namespace == "lakeq/lakeq-local" and obs.metrics.service == "lakeq-local"


def test_every_handler_is_traced_and_tracing_is_off_here():
    """Issue 34 item 3: each function's ``lambda_handler`` is wrapped by the one tracer (X-Ray under
    template.yaml's ``Tracing: Active``); in the tests and the local stack POWERTOOLS_TRACE_DISABLED
    keeps it off (no X-Ray daemon here)."""
    import ast

    from lakeq.common import obs
    untraced = []
    for app in sorted((ROOT / "functions").glob("*/app.py")):
        fn = next(n for n in ast.walk(ast.parse(app.read_text()))
                  if isinstance(n, ast.FunctionDef) and n.name == "lambda_handler")
        if "tracer.capture_lambda_handler" not in [ast.unparse(d).split("(")[0] for d in fn.decorator_list]:
            untraced.append(app.parent.name)
    assert untraced == []
    assert obs.tracer.disabled is True
