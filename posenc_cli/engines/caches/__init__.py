"""What a context costs each engine in memory: one module per engine (``MEMORY``, an
:class:`~posenc_cli.engines.caches.model.EngineMemory`), registered beside the engine's rope module in
:mod:`posenc_cli.frameworks.registry` (kept apart from it so that ``posenc memory`` loads no rope renderer, and
because each engine's allocator is a page of its own). Stdlib only."""
