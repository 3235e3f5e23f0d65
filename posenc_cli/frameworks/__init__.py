"""The registry of engines and training frameworks (the one list every command and the docs iterate over, and the
one loader of their modules), and the work that runs over it: ``posenc check``'s comparisons and ``posenc audit``'s
reading of a training run's settings. This stage sits above the engines and the trainers it loads."""
