"""The HTTP API: powertools routers per function and the request/response plumbing; it calls use cases
only, never the store.
"""
