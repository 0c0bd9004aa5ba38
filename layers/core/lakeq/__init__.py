"""lakeq core layer: pure rules, pynamodb models, repositories and the HTTP glue shared by functions.

Pure modules (no AWS imports): ``errors``, ``names``, ``receipts``, ``selection``, ``segments``,
``validation``, ``assignors``, ``groups``. Storage: ``models`` (pynamodb) and ``repos``. Use cases:
``service``. HTTP glue: ``http``.
"""
