"""``posenc experiment``: train tiny decoder-only transformers and measure how positions extrapolate.

Layout of the package:

* :mod:`~posenc_cli.experiment.settings` - methods, presets and input checks (stdlib only).
* :mod:`~posenc_cli.experiment.data` - the byte corpus (Python's own standard library by default), the copy task.
* :mod:`~posenc_cli.experiment.model` - the transformer and the torch side of each position method; every formula
  (sinusoidal table, RoPE inverse frequencies and scalings, ALiBi slopes) comes from posenc's numpy core.
* :mod:`~posenc_cli.experiment.run` - training, evaluation and the results dict.
* :mod:`~posenc_cli.experiment.chart` - the PNG chart (matplotlib, Agg).
* :mod:`~posenc_cli.experiment.passkey` - ``posenc experiment passkey``: a tiny Llama trained on passkey retrieval.
* :mod:`~posenc_cli.experiment.export` - that model as a GGUF file and a transformers folder (numpy and gguf only).
* :mod:`~posenc_cli.experiment.launch` - each command launched: torch checked, trained, the files written.

torch is imported by ``data``, ``model``, ``run`` and ``passkey`` only; nothing outside this package imports them at
module level.
"""

from __future__ import annotations
