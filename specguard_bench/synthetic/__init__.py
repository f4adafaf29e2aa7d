"""`specguard bench --synthetic`: timing with random-weight models of real architectures, no
weights needed: the random pairs (`models`), the timed runs (`measure`), the sweeps and the run
(`run.run_synthetic`) and the report files (`report`).

Built on `specguard_bench.common` only; this `__init__` imports nothing (the other modules import
torch).
"""
