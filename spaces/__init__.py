"""Search spaces that turn an Optuna trial into a simulator configuration (autotuner issue)."""

__all__: list[str] = []
