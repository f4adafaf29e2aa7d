"""The verifier's data work: `specguard calibrate` (the normaliser bounds, `calibrate`), and for
`specguard verifier ...` step-labelled solutions (`data`), their teacher-forced features
(`features`), how well each score predicts a correct step (`eval`) and the learned verifier's
training (`train`).

Built on `specguard_bench.common` and the reasoning benchmark's prompt (`reasoning.problems`);
this `__init__` imports nothing.
"""
