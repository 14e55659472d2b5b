"""Linear and Embedding without random initialization: their weights always come from a checkpoint.

Skipping init matters when the model is built on the meta device before loading: meta-device
random init goes through torch's decompositions, which cost seconds on first use.
"""

from __future__ import annotations

from torch import nn


class Linear(nn.Linear):
    # weight [out, in], bias [out]; y = x @ weight.T + bias
    def reset_parameters(self) -> None:
        pass


class Embedding(nn.Embedding):
    # weight [vocab, hidden]
    def reset_parameters(self) -> None:
        pass
