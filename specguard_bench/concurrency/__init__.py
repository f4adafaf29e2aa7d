"""`specguard bench --concurrency N,N,...`: the reasoning benchmark's problems served by N client
threads sharing one engine: the rounds (`rounds`), the resumable run (`run.run_concurrency`) and
its figures and reports (`report`).

Built on `specguard_bench.reasoning` (the problems, one request's run and grading); this
`__init__` imports nothing.
"""
