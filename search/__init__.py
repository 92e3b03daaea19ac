"""The tuner: objective, pruning, samplers, storages, study API and the ``palm-tune`` CLI.

The search itself arrives with the autotuner issue; for now this package holds the command-line
entry point.
"""

__all__: list[str] = []
