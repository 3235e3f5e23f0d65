"""Stage 2, what a real model says about positions: its sources (a config.json, a folder, a Hub id, a GGUF), the
reader that resolves them the way transformers builds the model, per layer group, and what is derived from that
alone (inspection, lint, v4/v5 conversion, the rope settings for one request).

Imports run down to :mod:`posenc_cli.rope` only.
"""
