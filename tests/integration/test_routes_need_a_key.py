"""Every route of every HTTP function answers 401 without a key, with API.md's body byte for byte,
except the public ones (issue 31 item 2: auth is one middleware, :func:`lakeq.api.http.make_app`).

The routes are enumerated from each function's resolver (powertools' own route table), not from a
list kept here, so a route added without the middleware's knowledge (or marked public by mistake)
fails. The public routes are listed here on purpose: making a route public is a decision this file
records."""
from __future__ import annotations

import copy
import re

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from tests.handlers import Context, sample

PUBLIC = {("GET", "/v1/health"), ("GET", "/v1/openapi.yaml"), ("GET", "/console"), ("GET", "/console/{asset}")}
MISSING = '{"error":{"code":"unauthorized","message":"missing Authorization: Bearer <key> header"}}'
UNKNOWN = '{"error":{"code":"unauthorized","message":"unknown API key"}}'


def http_functions(api) -> dict[str, tuple]:
    """logical id -> (handler, its resolver) for each template function served by ``make_app``."""
    out = {}
    for spec in {s.logical_id: s for _, _, _, s in api.routes}.values():
        h = api.handler(spec)
        app = getattr(h.module, "app", None)
        if isinstance(app, APIGatewayHttpResolver):
            out[spec.logical_id] = (h, app)
    return out


def resolver_routes(app) -> list[tuple[str, str]]:
    """(METHOD, /path/{param}) of every route the resolver serves (powertools' route table)."""
    return sorted({(r.method, r.openapi_path) for r in app._static_routes + app._dynamic_routes})


def call(handler, method: str, path: str, key: str | None) -> tuple[int, str]:
    ev = copy.deepcopy(sample("health.json"))
    ev["routeKey"] = ev["requestContext"]["routeKey"] = f"{method} {path}"
    ev["rawPath"] = ev["requestContext"]["http"]["path"] = path
    ev["requestContext"]["http"]["method"] = method
    if key is not None:
        ev["headers"]["authorization"] = f"Bearer {key}"
    out = handler(ev, Context())
    return out["statusCode"], out.get("body") or ""


def concrete(route: str) -> str:
    """A path the route matches: each parameter filled in (the console's asset with a real file)."""
    return re.sub(r"\{(\w+)\}", lambda m: "console.js" if m.group(1) == "asset" else "x1", route)


def test_every_route_but_the_public_ones_is_a_401_without_a_key(api):
    functions = http_functions(api)
    assert {"AdminFunction", "ProduceFunction", "ConsumeFunction", "SubscriptionsFunction"} <= set(functions)
    seen, public = 0, set()
    for name, (handler, app) in sorted(functions.items()):
        for method, route in resolver_routes(app):
            path = concrete(route)
            status, body = call(handler, method, path, key=None)
            if (method, route) in PUBLIC:
                public.add((method, route))
                assert status == 200, (name, method, route, status, body)
                continue
            seen += 1
            assert (status, body) == (401, MISSING), (name, method, route)
            assert call(handler, method, path, key="not-a-key") == (401, UNKNOWN), (name, method, route)
    assert public == PUBLIC  # no public route went missing (or lost its path)
    assert seen >= 55


def test_the_template_routes_are_the_resolvers_routes(api):
    """The gateway sends each HttpApi route of a function to it: the enumeration above covers them all."""
    functions = http_functions(api)
    wired = {(m, path) for m, path, _, spec in api.routes if spec.logical_id in functions}
    served = {r for _, app in functions.values() for r in resolver_routes(app)}
    assert wired == served


def test_a_route_nobody_serves_is_a_404_with_or_without_a_key(api):
    handler, _ = http_functions(api)["AdminFunction"]
    for key in (None, "not-a-key"):
        status, body = call(handler, "GET", "/v1/nothing-here", key=key)
        assert status == 404 and '"not_found"' in body
    assert call(handler, "DELETE", "/v1/health", key=None)[0] == 404  # a known path, another method
