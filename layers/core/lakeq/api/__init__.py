"""powertools Routers, one module per concern; each function's app.py includes its routers."""
