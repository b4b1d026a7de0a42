"""Text side of the pipeline: ingest, segmentation, phonemes, planning, writing.

Nothing in ``jobs`` knows about GPUs, CUDA or a particular inference backend; it
talks to ``engines`` only through :mod:`engines.base`.
"""
