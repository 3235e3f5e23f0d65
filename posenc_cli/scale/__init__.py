"""The stage just below ``pick``, scaling a model by name (``posenc scale``): the options as given and the request
they make (:mod:`.options`), and that request rendered for one engine through the registry, or written into the
model's config (:mod:`.scaled`). ``pick`` and ``scale`` both plan from a model and render through the registry;
``pick`` decides what to ask for, ``scale`` renders what was asked."""
