"""What every layer shares: the exception tree (:mod:`core.errors`), atomic files
(:mod:`core.files`) and voice resolution (:mod:`core.voice`).

``core`` imports nothing from ``jobs``, ``engines`` or ``workers``; they all may import it.
"""
