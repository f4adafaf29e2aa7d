"""What every benchmark mode shares: the compared methods (`methods`) and the engines that run
them (`engines`), a run's settings and their fingerprint (`settings`), the machine it ran on
(`environment`), per-problem rows (`rows`) and their summaries (`metrics`), the resumable store
(`store`) and the plots (`plot`).

Nothing here imports the modes (`reasoning`, `concurrency`, `synthetic`, `tool_calling`,
`verifier`) or the command line; this `__init__` imports nothing.
"""
