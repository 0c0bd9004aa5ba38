"""The echo app: one authenticated route, ``POST /things/{name}``, that answers what it read of its
request — its path argument, ``router.caller``, the body and the query — made with a given
``lakeq.api.http`` module (this checkout's, or a baseline's loaded beside it).

Shared by ``bench/resolver.py`` (what resolving costs, baseline against this checkout) and
``tests/unit/test_auth_middleware.py`` (threads resolving at once each read their own request): here
because a bench may not import tests. The caller sets ``http.authenticate`` (the key lookup) first:
the app calls no store."""
from __future__ import annotations


def echo_app(http):
    """An app made by ``http.make_app`` whose one route echoes its request."""
    router = http.Router()

    @router.post("/things/<name>")
    def thing(name: str):
        return http.json_response({"name": name, "caller": router.caller.client, "body": http.body(router),
                                   "query": http.query(router)})
    return http.make_app(router)
