"""The reasoning benchmark (`specguard bench`, `--suite reasoning`): GSM8K / MATH-500 problems
(`problems`), answers graded with math-verify (`answers`), every method run problem by problem
and resumable (`harness.run_bench`), drift from the target's text (`drift`) and the reports
(`report`).

Built on `specguard_bench.common`; this `__init__` imports nothing.
"""
