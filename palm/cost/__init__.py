"""The cost model shared by both engines: compute, communication, memory, pipeline."""
