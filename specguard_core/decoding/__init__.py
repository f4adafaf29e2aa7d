"""Decoding's plain parts, shared by the engine and a served target: the request's logits shaping
and the token sampling that follows it (`sampling`: pure tensor maths), and the data a proposal
carries (`proposal`: `SampleSpec`, how to sample a step; `Candidate`, one sampled step;
`Proposal`, k candidates over a forked cache), and prompt lookup (`lookup`: the tokens a
sequence's earlier text suggests next; `guesses`: a model's forwards that feed them beside its own
tokens). The proposing itself is the engine's (`engine/proposer.py`)."""
