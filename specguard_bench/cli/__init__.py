"""The bench's command line: the parsers of `specguard bench` and `specguard calibrate`
(`parsers`, with `main` for `python -m specguard_bench`), their handlers (`handlers`) and the
tool-calling suites' command (`suite_command`).

The top of the bench: it imports the modes, nothing imports it but `specguard.cli` and
`specguard_bench.__main__`. This `__init__` imports nothing, and `parsers` only light modules, so
`--help` loads no torch.
"""
