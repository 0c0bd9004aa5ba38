"""lakeq's data-lake jobs: pure DataFrame transforms (:mod:`.transforms`), the lake's storage
(:mod:`.store`: ``s3://`` on Glue, a local folder on a laptop), the driver-side plan builder
(:mod:`.plans`) and the two job bodies (:mod:`.jobs`). The entry points are
``glue_jobs/backlog.py`` and ``glue_jobs/rebalance_plan.py``."""
