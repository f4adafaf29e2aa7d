"""How one request runs: the caller's input checked and turned into a `Request` (`start`), and one
step of it, top to bottom (`step`). `SpecGuardEngine` (`engine/loop.py`) runs the steps in turn."""
