"""What a context costs in memory on each engine, and the longest that fits: ``posenc memory``, ``pick --memory``,
``check --memory`` (a stage above the registry: it loads each engine's memory model by its entry). Stdlib only."""
