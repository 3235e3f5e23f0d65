"""Stage 2, what a real model says about positions: its sources (a config.json, a folder, a Hub id, a GGUF), the
reader that resolves them the way transformers builds the model, per layer group, and what is derived from that
alone (inspection, lint, v4/v5 conversion, the rope settings for one request, ``verify --config``).

The reader, by job: ``model_types`` (what each transformers config class assumes, generated), ``config_keys`` (the
text model and its keys as the class holds them), ``value_checks`` (sizes and rope values allowed),
``rope_dicts`` (the rope dicts a class builds), ``model_positions`` (:class:`ModelPositions` and ``describe``: layer
groups, families) and ``facts`` (what a scaling request takes from a model, and the window each group serves).
Sources: ``sources`` (files, folders, stdin), ``hub`` and ``gguf/``.

Imports run down to :mod:`posenc_cli.rope` only.
"""
