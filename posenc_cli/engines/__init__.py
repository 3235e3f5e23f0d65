"""What each serving engine computes from a model's rope settings, next to what transformers computes.

One module per engine (:mod:`.hf` for transformers, :mod:`.vllm`, :mod:`.sglang`, :mod:`.llamacpp`), each
exporting its record (:mod:`.target`), registered in :mod:`posenc_cli.frameworks.registry` and each a *model* of
that engine's code at a pinned version: from a :class:`~posenc_cli.models.model_positions.ModelPositions` and the
serving length it returns an :class:`~.runs.EngineRun` with, per rope group, the inverse frequencies, the cos/sin
magnitude and the softmax scale the engine uses, the longest context it accepts (and what it needs to accept more),
and the exact invocation.
The models are checked against each engine's own code by the tests (vLLM's rotary classes from its wheel,
llama.cpp through llama-cpp-python); :func:`.runs.compare` measures every difference against transformers, and
:mod:`posenc_cli.frameworks.check` (a stage above) runs every engine and training framework for ``posenc check``.

The invocations (flags, overrides) are stdlib so ``posenc scale`` renders them without numpy; the numbers load
numpy when an engine is run. No CLI imports.
"""
