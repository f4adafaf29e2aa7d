"""Judging a draft step from the draft's internals: the paper's signals (`signals`), the verdict
rules (`verifier`) and learned verifier cards (`cards`)."""
